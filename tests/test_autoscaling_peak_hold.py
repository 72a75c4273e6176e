"""The peak hold (``scaleDown.peakHoldSeconds`` / ``peakHoldPercent``, issue 28): a floor of a share
of the highest recommendation of a long window, under the scale-down window. Pure decisions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kubeforge.api import InferenceServiceSpec
from kubeforge.autoscaling import AutoscalerState, AutoscalingPolicy, decide, peak_floor

T0 = 1_700_000_000.0
TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.0"}]}}


def policy(autoscaling: dict | None = None, **overrides) -> AutoscalingPolicy:
    """The API-default policy of a spec with ``autoscaling`` (camelCase), then ``overrides``."""
    spec = InferenceServiceSpec.model_validate({"pools": ["p"], "template": TEMPLATE, "maxReplicas": 16,
                                                "autoscaling": autoscaling or {}})
    return replace(AutoscalingPolicy.from_spec(spec), **overrides)


def desired_by_time(pol: AutoscalingPolicy, current: int, steps: list[tuple[float, float]]) -> dict[float, int]:
    """Decisions in sequence, each applied; ``{offset: desired}``."""
    state, out = AutoscalerState(last_decision_time=T0 - 3600), {}
    for dt, queue in steps:
        d = decide(pol, state, current, queue, T0 + dt)
        state, current, out[dt] = d.state, d.desired, d.desired
    return out


#: A burst (queue 32: 8 replicas at the default 4 waiting each) then nothing, every 5 s for 15 minutes.
BURST_THEN_QUIET = [(0.0, 32.0)] + [(float(t), 0.0) for t in range(5, 901, 5)]
FAST = {"scale_down_stabilization_seconds": 60.0, "scale_down_max_step": 100, "panic_threshold": 0.0,
        "scale_up_max_step": 100}


def test_off_by_default_and_its_share_defaults_in_the_api():
    p = policy()
    assert (p.peak_hold_seconds, p.peak_hold_fraction) == (0.0, 0.0)
    on = policy({"scaleDown": {"peakHoldSeconds": 7200}})
    assert on.peak_hold_seconds == 7200.0 and on.peak_hold_fraction == pytest.approx(0.6)
    assert on.longest_window_seconds == 7200.0  # recommendations are kept for the hold
    assert policy({"scaleDown": {"peakHoldSeconds": 600, "peakHoldPercent": 50}}).peak_hold_fraction == 0.5
    with pytest.raises(ValueError):
        replace(on, peak_hold_fraction=0.0)


def test_a_share_of_the_peak_is_held_after_the_window_until_the_hold_ends():
    held = desired_by_time(policy(**FAST, peak_hold_seconds=600.0, peak_hold_fraction=0.5), 1, BURST_THEN_QUIET)
    plain = desired_by_time(policy(**FAST), 1, BURST_THEN_QUIET)
    assert held[0.0] == plain[0.0] == 8
    assert held[55.0] == plain[55.0] == 8  # the 60 s scale-down window holds the whole peak
    assert plain[65.0] == 1  # then the plain policy lets every replica go
    assert held[65.0] == 4 and held[595.0] == 4  # half the peak, for the hold
    assert held[605.0] == 1  # the peak is out of the last 600 s


def test_the_floor_says_why_and_never_raises_a_recommendation_above_it():
    pol = policy(**FAST, peak_hold_seconds=600.0, peak_hold_fraction=0.75)
    recs = ((T0, 8),)
    floor, note = peak_floor(pol, recs, 2, T0 + 100)
    assert floor == 6 and "peak hold (75% of 8" in note  # ceil(0.75 x 8)
    assert peak_floor(pol, recs, 7, T0 + 100) is None  # the recommendation is above the floor
    assert peak_floor(pol, recs, 2, T0 + 600) is None  # out of the hold
    assert peak_floor(policy(**FAST), recs, 2, T0 + 100) is None  # off
    state = AutoscalerState(last_decision_time=T0 - 3600)
    d = decide(pol, state, 1, 32.0, T0)
    d = decide(pol, d.state, 8, 0.0, T0 + 120)
    assert d.desired == 6 and "peak hold" in d.reason
