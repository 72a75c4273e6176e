"""The sim cluster's heartbeat knob: ``$KUBEFORGE_SIM_HEARTBEAT_FACTOR`` -> kwokctl's
``--heartbeat-factor`` (slower kwok leases for big fleets, issue 31)."""

import pytest

from kubeforge.sim.cluster import HEARTBEAT_FACTOR_ENV, ClusterError, heartbeat_args


def test_unset_or_empty_passes_nothing():
    assert heartbeat_args({}) == ()
    assert heartbeat_args({HEARTBEAT_FACTOR_ENV: "  "}) == ()


def test_factor_is_passed_to_kwokctl():
    assert heartbeat_args({HEARTBEAT_FACTOR_ENV: "25"}) == ("--heartbeat-factor", "25")
    assert heartbeat_args({HEARTBEAT_FACTOR_ENV: "7.5"}) == ("--heartbeat-factor", "7.5")


@pytest.mark.parametrize("bad", ["0", "-3", "fast", "nan"])
def test_bad_factor_is_refused(bad):
    with pytest.raises(ClusterError, match=HEARTBEAT_FACTOR_ENV):
        heartbeat_args({HEARTBEAT_FACTOR_ENV: bad})
