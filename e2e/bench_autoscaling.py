"""Queue-driven autoscaling benchmark: kubeforge's autoscaler vs KEDA + HPA defaults on the Azure trace.

Three parts, each printed and labelled:

1. SIMULATED, 57 MIN: the whole Azure LLM inference trace (code, 57 min, 8,819 requests)
   replayed at trace speed in simulated time (no compression: a 0.5 s step, exact queue
   events inside each step) through the model-server simulator's pure queue model, once per
   autoscaler, with the same replicas model (30 s from patch to a Ready replica), the same
   Prometheus scrape (every 5 s) and the same bounds (``--min-replicas`` .. ``--max-replicas``,
   default 1..12, ``--target`` waiting requests per replica, default 4):
   - kubeforge: ``kubeforge.autoscaling.decide`` with the policy that
     ``AutoscalingPolicy.from_spec`` builds from an InferenceService spec that sets only
     those three fields (every other field at its API default);
   - KEDA + HPA defaults: KEDA Prometheus scaler polling every 30 s, HPA sync every 15 s,
     HPA tolerance 0.1, scale-up max(4 pods, 100%)/15 s, scale-down stabilization 300 s,
     100%/15 s. Two variants: the HPA reading the metric live at each sync (KEDA's default),
     and reading KEDA's value cached at its 30 s poll (``useCachedMetrics: true``).
2. SIMULATED, 24 H (``--day``, on by default; ``--no-day`` skips it): a day-long arrival
   stream built from the same trace (:func:`day_arrivals`: the 57 minutes tiled over 24 h,
   each tile circularly shifted by a seeded random offset, then thinned by a diurnal rate
   curve, :func:`diurnal_fraction`, 15% of the peak rate at 03:00, 100% at 15:00), replayed
   the same way through the same three autoscalers.
3. LIVE (real time, kubeforge only; ``--no-live`` skips it): a slice of the same trace
   (minutes 8-16, quiet then a burst) time-compressed by 6x (80 s) through the simulator's
   HTTP /metrics, a real Prometheus (Debian's binary, scrape 1 s) and the real operator on
   the local control plane (kwok GPU nodes), with pollingIntervalSeconds 1 and a 10 s
   scale-down window. It shows the live path works; its figures are not comparable with 1-2.

Figures: time from a queue spike to replicas patched (a spike starts when the waiting queue
exceeds target x replicas asked for, after being at or below it; it ends at the next upward
patch; spikes that drain before any patch are counted apart), request queue wait (arrival to
start of service), replica-minutes (replicas asked for, integrated over time: what the GPUs
are paid for), and scale direction reversals (Up followed by Down or the reverse).

Trace: Azure LLM inference trace 2023 (code), Azure ``AzurePublicDataset``, CC BY 4.0;
Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase Splitting", ISCA 2024.

Run: ``.venv/bin/python e2e/bench_autoscaling.py`` (``--no-live`` skips part 3, ``--help``
lists the rest). The script measures and prints; it asserts no wall-clock time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
import uuid
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from kubeforge.api import InferenceServiceSpec  # noqa: E402
from kubeforge.autoscaling import AutoscalerState, AutoscalingPolicy, decide  # noqa: E402
from kubeforge.sim.modelserver import (  # noqa: E402
    QueueState, Request, ServiceModel, advance, load_trace, percentile, service_seconds, trace_arrivals,
)

#: The Azure code trace, found relative to the repository (``../shared`` from its root).
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "traces" / "azure-llm-inference-code-2023.csv"

MODEL = ServiceModel(slots=4, base_seconds=0.5, prefill_tokens_per_second=2000.0, seconds_per_output_token=0.05)
STARTUP_S = 30.0
SCRAPE_S = 5.0
DT = 0.5
DAY_S = 24 * 3600.0

#: The diurnal curve's defaults: rate at the night trough as a fraction of the peak, and the
#: hours (local time of the simulated day) of the peak; the trough is 12 h away.
NIGHT_FRACTION = 0.15
PEAK_HOUR = 15.0


@dataclass(frozen=True)
class Bounds:
    """What both autoscalers are given: replica bounds and the per-replica queue target.

    Attributes:
        min_replicas: Fewest replicas (``spec.minReplicas``; KEDA ``minReplicaCount``), >= 1.
        max_replicas: Most replicas (``spec.maxReplicas``; KEDA ``maxReplicaCount``).
        target: Waiting requests per replica (``autoscaling.targetPerReplica``; KEDA
            ``threshold`` with an ``AverageValue`` metric type).
    """

    min_replicas: int = 1
    max_replicas: int = 12
    target: float = 4.0


# --- autoscalers as decision loops -----------------------------------------------------------


def kubeforge_policy(b: Bounds, overrides: dict | None = None) -> tuple[AutoscalingPolicy, float]:
    """The policy kubeforge runs for an InferenceService that sets only ``b``.

    Args:
        b: Replica bounds and target.
        overrides: ``AutoscalingPolicy`` fields to replace after the spec is read
            (``--policy``), e.g. ``{"panic_threshold": 2.0}``, to measure an alternative;
            ``None`` for the defaults.

    Returns:
        ``(policy, polling interval in seconds)``, both from the API defaults of every field
        that ``b`` does not set (``AutoscalingPolicy.from_spec``), then ``overrides``.
    """
    spec = InferenceServiceSpec.model_validate({
        "pools": ["bench"], "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]}},
        "minReplicas": b.min_replicas, "maxReplicas": b.max_replicas,
        "autoscaling": {"targetPerReplica": b.target},
    })
    policy = AutoscalingPolicy.from_spec(spec)
    if overrides:
        policy = replace(policy, **overrides)
    return policy, float(spec.autoscaling.polling_interval_seconds)


class Kubeforge:
    """kubeforge's pure core as the operator runs it: one :func:`decide` per polling interval."""

    def __init__(self, b: Bounds, overrides: dict | None = None):
        self.policy, self.interval = kubeforge_policy(b, overrides)
        self.name = "kubeforge (InferenceService defaults)" if not overrides else (
            "kubeforge (" + ", ".join(f"{k}={v:g}" for k, v in overrides.items()) + ")")
        self.state = AutoscalerState()
        self.next = 0.0

    def tick(self, now: float, current: int, seen: float) -> int | None:
        if now < self.next:
            return None
        self.next = now + self.interval
        d = decide(self.policy, self.state, current, seen, now)
        self.state = d.state
        return d.desired


class KedaHpa:
    """KEDA (Prometheus scaler, pollingInterval 30 s) + HPA v2 defaults, AverageValue target."""

    def __init__(self, b: Bounds, cached: bool):
        self.b = b
        self.cached = cached
        self.name = "KEDA+HPA defaults" + (" (useCachedMetrics)" if cached else " (live metric)")
        self.sync, self.poll = 15.0, 30.0
        self.next_sync = 0.0
        self.next_poll = 0.0
        self.cached_value = 0.0
        self.recs: list[tuple[float, int]] = []
        self.events: list[tuple[float, int]] = []  # (time, replicas before) for the policies

    def tick(self, now: float, current: int, seen: float) -> int | None:
        lo, hi, target = self.b.min_replicas, self.b.max_replicas, self.b.target
        if now >= self.next_poll:
            self.next_poll = now + self.poll
            self.cached_value = seen
        if now < self.next_sync:
            return None
        self.next_sync = now + self.sync
        m = self.cached_value if self.cached else seen
        ratio = m / (target * current) if current else math.inf
        rec = current if abs(ratio - 1) <= 0.1 else math.ceil(m / target)
        rec = max(lo, min(hi, rec))
        self.recs = [(t, r) for t, r in self.recs if t > now - 300] + [(now, rec)]
        self.events = [(t, r) for t, r in self.events if t > now - 15]
        if rec > current:  # scale up: stabilization 0, max(4 pods, 100%) per 15 s
            start = min([r for _, r in self.events] + [current])
            desired = min(rec, max(start + 4, start * 2))
        elif rec < current:  # scale down: highest recommendation of the last 300 s, 100% per 15 s
            desired = min(max(r for _, r in self.recs), current)
        else:
            desired = current
        desired = max(lo, min(hi, desired))
        if desired != current:
            self.events.append((now, current))
        return desired


# --- arrivals: the 57-minute trace, and a day built from it ----------------------------------


def diurnal_fraction(t: float, night_fraction: float = NIGHT_FRACTION, peak_hour: float = PEAK_HOUR) -> float:
    """Arrival rate at ``t`` as a fraction of the day's peak rate: one smooth day/night cycle.

    ``f(t) = n + (1 - n) * (1 + cos(2 pi (h - peak_hour) / 24)) / 2`` with ``h`` the hour of
    the day at ``t`` and ``n = night_fraction``: a single 24 h cosine harmonic, ``1.0`` at
    ``peak_hour`` and ``n`` twelve hours away (03:00 with the defaults). The shape is the
    first-order (one harmonic) fit commonly used for diurnal load (e.g. Shahrad et al.,
    "Serverless in the Wild", USENIX ATC 2020, on Azure Functions invocations); the 15%
    trough and 15:00 peak are this benchmark's assumptions, printed with its output.

    Args:
        t: Seconds since the simulated day's midnight (any real; taken modulo 24 h).
        night_fraction: The trough as a fraction of the peak, in ``[0, 1]``.
        peak_hour: Hour of the peak, ``[0, 24)``.

    Returns:
        A fraction in ``[night_fraction, 1]``.
    """
    h = (t / 3600.0) % 24.0
    return night_fraction + (1.0 - night_fraction) * (1.0 + math.cos(2.0 * math.pi * (h - peak_hour) / 24.0)) / 2.0


def day_arrivals(trace: list[tuple[float, int, int]], model: ServiceModel, seed: int = 1,
                 seconds: float = DAY_S, night_fraction: float = NIGHT_FRACTION,
                 peak_hour: float = PEAK_HOUR) -> list[Request]:
    """A day-long arrival stream from a short trace: tiled, shifted, then thinned by time of day.

    1. **Tile**: the trace (``T`` seconds long, its period taken as its span plus one mean
       inter-arrival gap) is repeated back to back until ``seconds`` are covered. Each tile
       is circularly shifted by a random offset in ``[0, T)`` (drawn from ``seed``), so the
       bursts do not fall at the same minute of every hour.
    2. **Thin**: each request at time ``t`` is kept with probability
       :func:`diurnal_fraction` ``(t)`` (Lewis & Shedler's thinning, "Simulation of
       nonhomogeneous Poisson processes by thinning", 1979, applied to the trace's own
       arrival process). The trace's rate is thereby the day's peak rate; its burst
       structure is kept, scaled down by the same fraction at night.

    Deterministic: the same arguments give the same requests.

    Args:
        trace: ``(seconds since first request, context tokens, generated tokens)`` rows,
            sorted (:func:`kubeforge.sim.modelserver.load_trace`).
        model: The replica model that turns tokens into service seconds.
        seed: Seeds the tile shifts and the thinning.
        seconds: Length of the stream, simulated seconds (a day by default).
        night_fraction: See :func:`diurnal_fraction`.
        peak_hour: See :func:`diurnal_fraction`.

    Returns:
        Requests sorted by arrival, arrival in seconds since the simulated midnight.
    """
    if not trace:
        return []
    span = trace[-1][0]
    period = span + (span / (len(trace) - 1) if len(trace) > 1 else 1.0)
    rng = random.Random(seed)
    service = [service_seconds(model, c, g) for _, c, g in trace]
    out: list[Request] = []
    base = 0.0
    while base < seconds:
        shift = rng.uniform(0.0, period)
        for (t, _, _), s in zip(trace, service):
            at = base + (t - shift) % period
            if at < seconds and rng.random() < diurnal_fraction(at, night_fraction, peak_hour):
                out.append(Request(at, s))
        base += period
    out.sort(key=lambda r: r.arrival)
    return out


def superpose(base: list[Request], copies: int, seed: int, period: float,
              start: float = 0.0, end: float = math.inf) -> list[Request]:
    """More load of the same shape: ``base`` plus ``copies`` circularly shifted copies of it.

    Each copy is ``base`` shifted by a random offset in ``[0, period)`` (from ``seed``), modulo
    ``period``, and only its requests that land in ``[start, end)`` are added: over the whole
    period this multiplies the load by ``copies + 1`` (the sweep's 8x and 20x cases), over a
    window it is a sustained surge (the sweep's surge cases).

    Args:
        base: Requests sorted by arrival, simulated seconds in ``[0, period)``.
        copies: How many shifted copies to add, >= 0.
        seed: Seeds the shifts.
        period: The length the copies wrap around, seconds.
        start: Start of the window the copies are added in, seconds.
        end: End of that window, seconds.

    Returns:
        Requests sorted by arrival.
    """
    rng = random.Random(seed)
    out = list(base)
    for _ in range(copies):
        shift = rng.uniform(0.0, period)
        for r in base:
            at = (r.arrival - shift) % period
            if start <= at < end:
                out.append(Request(at, r.service))
    out.sort(key=lambda r: r.arrival)
    return out


# --- the replay ------------------------------------------------------------------------------


@dataclass
class Result:
    """Figures of one replay. Times in simulated seconds, replica-seconds in replica x s."""

    name: str
    spike_delays: list = field(default_factory=list)
    absorbed: int = 0
    waits: list = field(default_factory=list)
    replica_seconds: float = 0.0
    reversals: int = 0
    patches: int = 0
    max_replicas: int = 0


def count_change(r, before: int, after: int, last_dir: str | None) -> tuple[str, bool]:
    """Count one replica change in ``r`` (patches, and a reversal when the direction flips);
    returns (direction, whether it went up)."""
    d = "Up" if after > before else "Down"
    if last_dir and d != last_dir:
        r.reversals += 1
    r.patches += 1
    return d, d == "Up"


def spike_tracker(target: float, max_r: int):
    """Feed (t, waiting, asked_replicas, patched_up) samples; collects spike -> patch delays."""
    res = {"delays": [], "absorbed": 0}
    st = {"start": None}

    def feed(t: float, waiting: int, asked: int, patched_up: bool) -> None:
        if st["start"] is not None and patched_up:
            res["delays"].append(t - st["start"])
            st["start"] = None
        over = waiting > target * asked and asked < max_r
        if st["start"] is None and over and not patched_up:
            st["start"] = t
        elif st["start"] is not None and not over:
            res["absorbed"] += 1
            st["start"] = None

    return feed, res


def replay(scaler, arrivals: list[Request], end: float, b: Bounds) -> Result:
    """Replay ``arrivals`` through the queue model with ``scaler`` deciding the replicas.

    Simulated time in ``DT`` steps up to ``end`` seconds; a patched-up replica is Ready
    ``STARTUP_S`` later, a removed one goes at once (the newest first); the autoscaler sees
    the waiting queue as scraped every ``SCRAPE_S``.

    Args:
        scaler: An object with ``name`` and ``tick(now, current, seen) -> int | None``.
        arrivals: Requests sorted by arrival (simulated seconds).
        end: Where the replay stops, simulated seconds.
        b: Bounds (the first replica count is ``b.min_replicas``, the spike threshold uses
            ``b.target`` and ``b.max_replicas``).

    Returns:
        The :class:`Result`.
    """
    q = QueueState()
    r = Result(scaler.name)
    asked = b.min_replicas
    pods = [0.0] * asked  # ready-at times
    ready_at_next: float = math.inf  # earliest not-yet-ready pod, to skip recounting
    ready = asked
    seen, next_scrape = 0.0, 0.0
    last_dir = None
    feed, sp = spike_tracker(b.target, b.max_replicas)
    n = len(arrivals)
    i, step = 0, 0
    while True:
        step += 1
        t = step * DT
        if t > end:
            break
        j = i
        while j < n and arrivals[j].arrival <= t:
            j += 1
        if ready_at_next <= t - DT:
            ready = sum(1 for p in pods if p <= t - DT)
            ready_at_next = min((p for p in pods if p > t - DT), default=math.inf)
        if j > i or q.running or q.waiting:
            advance(q, t, ready * MODEL.slots, arrivals[i:j])
        else:
            q.time = t
        i = j
        if t >= next_scrape:
            next_scrape = t + SCRAPE_S
            seen = float(len(q.waiting))
        want = scaler.tick(t, asked, seen)
        up = False
        if want is not None and want != asked:
            last_dir, up = count_change(r, asked, want, last_dir)
            if want > asked:
                pods += [t + STARTUP_S] * (want - asked)
            else:
                pods = sorted(pods)[:want]  # the newest (not yet ready) go first
            asked = want
            ready = sum(1 for p in pods if p <= t - DT)
            ready_at_next = min((p for p in pods if p > t - DT), default=math.inf)
        feed(t, len(q.waiting), asked, up)
        r.replica_seconds += asked * DT
        if asked > r.max_replicas:
            r.max_replicas = asked
    r.waits = q.waits
    r.spike_delays, r.absorbed = sp["delays"], sp["absorbed"]
    return r


def fmt(x: float, unit: str = "s") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1f}{unit}"


def table(results: list[Result]) -> None:
    """Print one row per result: spike->patch p50/p95 and counts, wait p50/p95, cost, reversals."""
    head = (f"{'autoscaler':44} {'spike->patch p50':>16} {'p95':>7} {'spikes':>9} {'wait p50':>9} {'wait p95':>9} "
            f"{'replica-min':>12} {'reversals':>10} {'patches':>8} {'max':>4}")
    print(head)
    print("-" * len(head))
    for r in results:
        spikes = f"{len(r.spike_delays)}+{r.absorbed}"
        print(f"{r.name:44} {fmt(percentile(r.spike_delays, 50)):>16} {fmt(percentile(r.spike_delays, 95)):>7} "
              f"{spikes:>9} {fmt(percentile(r.waits, 50)):>9} {fmt(percentile(r.waits, 95)):>9} "
              f"{r.replica_seconds / 60:>12.1f} {r.reversals:>10} {r.patches:>8} {r.max_replicas:>4}")


def compare(results: list[Result]) -> None:
    """Print kubeforge's reversals and replica-minutes against each KEDA+HPA variant (ratios)."""
    kf, others = results[0], results[1:]
    for o in others:
        rev = f"{kf.reversals / o.reversals:.2f}x" if o.reversals else "n/a"
        cost = kf.replica_seconds / o.replica_seconds if o.replica_seconds else math.nan
        p50k, p50o = percentile(kf.spike_delays, 50), percentile(o.spike_delays, 50)
        print(f"  kubeforge vs {o.name}: reversals {kf.reversals} vs {o.reversals} ({rev}), "
              f"replica-minutes {kf.replica_seconds / 60:.0f} vs {o.replica_seconds / 60:.0f} ({cost:.2f}x), "
              f"spike->patch p50 {fmt(p50k)} vs {fmt(p50o)}")


def run_all(arrivals: list[Request], end: float, b: Bounds, overrides: dict | None = None,
            quiet: bool = False) -> list[Result]:
    """Replay ``arrivals`` through kubeforge and both KEDA+HPA variants; print the table.

    Args:
        arrivals: Requests sorted by arrival, simulated seconds.
        end: Simulated seconds to replay.
        b: Bounds for all three.
        overrides: kubeforge policy overrides (:func:`kubeforge_policy`).
        quiet: Print nothing (the sweep prints its own summary).

    Returns:
        ``[kubeforge, KEDA+HPA live metric, KEDA+HPA useCachedMetrics]`` results.
    """
    t0 = time.process_time()
    results = [replay(Kubeforge(b, overrides), arrivals, end, b), replay(KedaHpa(b, cached=False), arrivals, end, b),
               replay(KedaHpa(b, cached=True), arrivals, end, b)]
    if not quiet:
        table(results)
        compare(results)
        print(f"(spikes: answered by a patch + drained before any patch; replay CPU {time.process_time() - t0:.1f}s)")
    return results


def describe(b: Bounds, arrivals: list[Request], overrides: dict | None = None) -> str:
    policy, interval = kubeforge_policy(b, overrides)
    mean = sum(a.service for a in arrivals) / len(arrivals) if arrivals else math.nan
    return (f"replica: {MODEL.slots} concurrent requests, mean service {mean:.2f}s; {STARTUP_S:.0f}s patch->Ready; "
            f"scrape every {SCRAPE_S:.0f}s; replicas {b.min_replicas}..{b.max_replicas}, target {b.target:g} waiting/replica\n"
            f"kubeforge policy ({'API defaults' if not overrides else 'API defaults + --policy'}): polling {interval:g}s, "
            f"tolerance {policy.tolerance:g}, up window {policy.scale_up_stabilization_seconds:g}s "
            f"+{policy.scale_up_max_step}/{policy.scale_up_period_seconds:g}s (panic above {policy.panic_threshold:g}x), "
            f"down window {policy.scale_down_stabilization_seconds:g}s "
            f"-{policy.scale_down_max_step}/{policy.scale_down_period_seconds:g}s")


def simulated(trace_path: Path, b: Bounds, overrides: dict | None = None) -> list[Result]:
    """Part 1: the 57-minute trace at trace speed (plus 10 quiet minutes to scale down)."""
    trace = load_trace(trace_path)
    arrivals = trace_arrivals(trace, MODEL, compression=1.0)
    end = trace[-1][0] + 600
    print("== SIMULATED, 57 MIN: discrete-event replay in simulated time (trace speed, compression 1x) ==")
    print(f"trace: {len(trace)} requests over {trace[-1][0] / 60:.1f} min; {describe(b, arrivals, overrides)}")
    return run_all(arrivals, end, b, overrides)


def simulated_day(trace_path: Path, b: Bounds, seed: int, night_fraction: float, peak_hour: float,
                  overrides: dict | None = None) -> list[Result]:
    """Part 2: a day-long diurnal stream built from the trace (:func:`day_arrivals`)."""
    trace = load_trace(trace_path)
    arrivals = day_arrivals(trace, MODEL, seed=seed, night_fraction=night_fraction, peak_hour=peak_hour)
    print("\n== SIMULATED, 24 H: the trace tiled over a day and thinned by a diurnal curve (simulated time) ==")
    hourly = [0] * 24
    for a in arrivals:
        hourly[int(a.arrival // 3600) % 24] += 1
    print(f"day: {len(arrivals)} requests, seed {seed}; rate {night_fraction:.0%} of peak at "
          f"{(peak_hour + 12) % 24:02.0f}:00 to 100% at {peak_hour:02.0f}:00; requests per hour "
          f"min {min(hourly)} max {max(hourly)}; {describe(b, arrivals, overrides)}")
    return run_all(arrivals, DAY_S, b, overrides)


def sweep(trace_path: Path, b: Bounds, overrides: dict | None = None) -> None:
    """Part 4 (``--sweep``): the same comparison over shapes the defaults were not chosen on alone.

    Day-long streams with three seeds, a 50% and a flat (100%) night, other bounds and
    targets; the 57-minute trace as is, with a 2x and a 4x surge from minute 15 to 35
    (:func:`superpose`), and at 8x and 20x the load with up to 64 replicas. One line per
    shape: kubeforge against the better of the two KEDA+HPA variants on each figure.
    """
    trace = load_trace(trace_path)
    short = trace_arrivals(trace, MODEL, compression=1.0)
    span = trace[-1][0]
    period = span + span / max(1, len(trace) - 1)
    end57 = span + 600
    lo, hi, tg = b.min_replicas, b.max_replicas, b.target

    def day(seed: int = 1, night: float = NIGHT_FRACTION) -> list[Request]:
        return day_arrivals(trace, MODEL, seed=seed, night_fraction=night)

    cases = [
        ("24h seed 1", b, lambda: day(1), DAY_S),
        ("24h seed 2", b, lambda: day(2), DAY_S),
        ("24h seed 3", b, lambda: day(3), DAY_S),
        ("24h night 50%", b, lambda: day(1, 0.5), DAY_S),
        ("24h flat (no night)", b, lambda: day(1, 1.0), DAY_S),
        ("24h maxReplicas 8", Bounds(min(lo, 8), 8, tg), lambda: day(1), DAY_S),
        ("24h maxReplicas 24", Bounds(lo, max(hi, 24), tg), lambda: day(1), DAY_S),
        ("24h target 2", Bounds(lo, hi, tg / 2), lambda: day(1), DAY_S),
        ("24h target 8", Bounds(lo, hi, tg * 2), lambda: day(1), DAY_S),
        ("24h minReplicas 2", Bounds(max(lo, 2), max(hi, 2), tg), lambda: day(1), DAY_S),
        ("57min", b, lambda: short, end57),
        ("57min 2x surge min 15-35", b, lambda: superpose(short, 1, 7, period, 900, 2100), end57),
        ("57min 4x surge min 15-35", b, lambda: superpose(short, 3, 7, period, 900, 2100), end57),
        ("57min 8x load, max 64", Bounds(lo, max(hi, 64), tg), lambda: superpose(short, 7, 11, period), end57),
        ("57min 20x load, max 64", Bounds(lo, max(hi, 64), tg), lambda: superpose(short, 19, 11, period), end57),
    ]
    print("\n== SWEEP: kubeforge vs the better KEDA+HPA variant per figure, over other shapes (simulated time) ==")
    policy, _ = kubeforge_policy(b, overrides)
    print(f"kubeforge: {'API defaults' if not overrides else overrides}; KEDA+HPA: the lower of its two variants per figure")
    head = (f"{'shape':26} {'reversals kf/KEDA':>18} {'replica-min kf/KEDA':>22} {'ratio':>6} "
            f"{'spike p50/p95 kf':>17} {'KEDA':>11} {'wait p95 kf':>12} {'KEDA':>6}  target")
    print(head)
    print("-" * len(head))
    t0 = time.process_time()
    met = 0
    for name, bb, arrivals, end in cases:
        kf, *keda = run_all(arrivals(), end, bb, overrides, quiet=True)
        k_rev = min(r.reversals for r in keda)
        k_rm = min(r.replica_seconds for r in keda) / 60
        k_p50 = min(percentile(r.spike_delays, 50) for r in keda)
        k_p95 = min(percentile(r.spike_delays, 95) for r in keda)
        k_w95 = min(percentile(r.waits, 95) for r in keda)
        rm = kf.replica_seconds / 60
        ok = kf.reversals <= k_rev and rm <= k_rm
        met += ok
        print(f"{name:26} {kf.reversals:>8} / {k_rev:<7} {rm:>10.0f} / {k_rm:<9.0f} {rm / k_rm:>6.2f} "
              f"{fmt(percentile(kf.spike_delays, 50)):>8}/{fmt(percentile(kf.spike_delays, 95)):<8} "
              f"{fmt(k_p50):>5}/{fmt(k_p95):<5} {fmt(percentile(kf.waits, 95)):>12} {fmt(k_w95):>6}  "
              f"{'met' if ok else 'MISSED'}")
    print(f"(target = reversals and replica-minutes at or below KEDA+HPA's: met on {met} of {len(cases)} shapes; "
          f"sweep CPU {time.process_time() - t0:.0f}s)")


# --- the live run ----------------------------------------------------------------------------


def live(cluster_name: str, trace_path: Path, compression: float = 6.0, start_min: float = 8, end_min: float = 16) -> int:
    from kubernetes import client, config

    from kubeforge.demo import start_operator, stop_operator
    from kubeforge.sim.cluster import Cluster
    from kubeforge.sim.fleet import Fleet, node_manifests
    from kubeforge.sim.modelserver import ModelServerSim
    from kubeforge.sim.prometheus import Prometheus

    seconds = (end_min - start_min) * 60 / compression
    print("\n== LIVE: kubeforge through the simulator's /metrics, a real Prometheus and the real operator ==")
    print(f"trace minutes {start_min:g}-{end_min:g} time-compressed {compression:g}x ({seconds:.0f}s); cluster {cluster_name}; "
          "pollingIntervalSeconds 1, scale-down window 10s, target 4, replicas 1..8, scrape 1s")
    c = Cluster(cluster_name)
    was_running = c.running()
    c.up(None, log=lambda m: print(f"[cluster] {m}"))
    c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    c.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    start_operator(c)
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", ns)
    f = Fleet.model_validate({"name": "bench", "nodePrefix": f"{ns}-", "groups": [
        {"name": "g", "count": 2, "capacityType": "on-demand", "gpu": {"count": 8}, "labels": {"kubeforge.io/test-fleet": ns}}]})
    nodes = node_manifests(f)
    c.apply_nodes(nodes)
    objs = client.CustomObjectsApi(config.new_client_from_config(config_file=c.kubeconfig))
    sim = ModelServerSim(kubeconfig=c.kubeconfig).start()
    prom = Prometheus([sim.target]).start()
    rc = 0
    try:
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "kubeforge.io/v1alpha1", "kind": "GPUPool", "metadata": {"name": ns},
            "spec": {"nodeSelector": {"matchLabels": {"kubeforge.io/test-fleet": ns}}}}))
        sim.add_service(ns, "chat", MODEL)
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "kubeforge.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": "chat", "namespace": ns},
            "spec": {"pools": [ns], "gpusPerReplica": 1, "minReplicas": 1, "maxReplicas": 8,
                     "template": {"spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.0"}]}},
                     "autoscaling": {"prometheusURL": prom.url, "metric": "VLLMWaiting", "targetPerReplica": 4, "pollingIntervalSeconds": 1,
                                     "scaleDown": {"stabilizationWindowSeconds": 10, "maxStep": 2, "periodSeconds": 2}}}}))

        def asked() -> int | None:
            try:
                svc = objs.get_namespaced_custom_object("kubeforge.io", "v1alpha1", ns, "inferenceservices", "chat")
                return int((svc.get("status") or {}).get("desiredReplicas") or 0)
            except Exception:  # noqa: BLE001
                return None

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (asked() == 1 and sim.snapshot(ns, "chat")["ready"] == 1):
            time.sleep(0.5)
        arrivals = trace_arrivals(load_trace(trace_path), MODEL, compression, start=start_min * 60, end=end_min * 60,
                                  offset=sim.clock() + 1)
        sim.replay(ns, "chat", arrivals)
        r = Result("kubeforge LIVE (real Prometheus + operator)")
        feed, sp = spike_tracker(4.0, 8)
        cur, last_dir = asked() or 1, None
        t_start = time.monotonic()
        log_lines = []
        while time.monotonic() < t_start + seconds + 20:
            time.sleep(0.5)
            now = time.monotonic()
            a = asked()
            snap = sim.snapshot(ns, "chat")
            up = False
            if a is not None and a != cur:
                last_dir, up = count_change(r, cur, a, last_dir)
                log_lines.append(f"  t={now - t_start:5.1f}s replicas {cur} -> {a} (queue {snap['waiting']}, ready {snap['ready']})")
                cur = a
            feed(now, snap["waiting"], cur, up)
            r.replica_seconds += cur * 0.5 * compression  # in trace time, to compare per trace minute
            r.max_replicas = max(r.max_replicas, cur)
        snap = sim.snapshot(ns, "chat")
        r.waits = [w * compression for w in snap["waits"]]  # back to trace seconds
        r.spike_delays, r.absorbed = sp["delays"], sp["absorbed"]
        print("\n".join(log_lines) or "  (no scale events)")
        table([r])
        print(f"(live: {len(arrivals)} requests, {snap['completed']} completed; spike->patch in real seconds; "
              f"waits and replica-minutes scaled back to trace time by {compression:g}x)")
        if not r.patches:
            rc = 1
    finally:
        prom.close()
        sim.stop()
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        c.kubectl("delete", "gpupool", ns, "--ignore-not-found", "--wait=false", check=False)
        c.kubectl("delete", "node", *[n["metadata"]["name"] for n in nodes], "--ignore-not-found", "--wait=false", check=False)
        if not was_running and not os.environ.get("KUBEFORGE_KEEP_CLUSTER"):
            stop_operator(c)
            c.down(log=lambda m: print(f"[cluster] {m}"))
    return rc


def parse_overrides(items: list[str]) -> dict:
    """``["panic_threshold=2", ...]`` -> ``{"panic_threshold": 2.0}``, checked against the policy fields."""
    names = {f.name: f.type for f in fields(AutoscalingPolicy)}
    out: dict = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in names or not value:
            raise SystemExit(f"--policy {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(names)}")
        out[key] = int(value) if names[key] in ("int", int) else float(value)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                    help="Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens); "
                         "default: ../shared/data/traces/azure-llm-inference-code-2023.csv from the repository root")
    ap.add_argument("--min-replicas", type=int, default=Bounds.min_replicas, help="minReplicas for both autoscalers (>= 1)")
    ap.add_argument("--max-replicas", type=int, default=Bounds.max_replicas, help="maxReplicas for both autoscalers")
    ap.add_argument("--target", type=float, default=Bounds.target, help="waiting requests per replica (targetPerReplica)")
    day = ap.add_mutually_exclusive_group()
    day.add_argument("--day", dest="day", action="store_true", default=True,
                     help="also replay a day-long diurnal stream built from the trace (the default)")
    day.add_argument("--no-day", dest="day", action="store_false", help="skip the day-long run")
    ap.add_argument("--day-only", action="store_true", help="only the day-long run (no 57-min run, no live run)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the day-long stream (tile shifts and thinning)")
    ap.add_argument("--night-fraction", type=float, default=NIGHT_FRACTION, help="night trough as a fraction of the peak rate")
    ap.add_argument("--peak-hour", type=float, default=PEAK_HOUR, help="hour of the peak rate (trough 12 h away)")
    ap.add_argument("--sweep", action="store_true",
                    help="also compare over 15 other shapes (seeds, nights, bounds, targets, surges, 8x/20x load; ~1 min CPU)")
    ap.add_argument("--policy", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a kubeforge AutoscalingPolicy field after the API defaults, e.g. "
                         "--policy panic_threshold=2 (repeatable; measures alternatives, the live run ignores it)")
    ap.add_argument("--no-live", action="store_true", help="skip the live run (no cluster, no Prometheus)")
    ap.add_argument("--cluster", default=os.environ.get("KUBEFORGE_BENCH_CLUSTER", "kubeforge-bench"))
    a = ap.parse_args(argv)
    if a.min_replicas < 1 or a.max_replicas < a.min_replicas or not a.target > 0:
        ap.error("need 1 <= --min-replicas <= --max-replicas and --target > 0")
    if not 0 <= a.night_fraction <= 1:
        ap.error("--night-fraction must be in [0, 1]")
    if not a.trace.is_file():
        ap.error(f"--trace {a.trace}: no such file")
    overrides = parse_overrides(a.policy) or None
    b = Bounds(a.min_replicas, a.max_replicas, a.target)
    print("Trace: Azure LLM inference trace 2023 (code), AzurePublicDataset, CC BY 4.0; "
          f"Patel et al., \"Splitwise\", ISCA 2024. File: {a.trace.name}\n")
    if not a.day_only:
        simulated(a.trace, b, overrides)
    if a.day or a.day_only:
        simulated_day(a.trace, b, a.seed, a.night_fraction, a.peak_hour, overrides)
    if a.sweep:
        sweep(a.trace, b, overrides)
    if a.no_live or a.day_only:
        return 0
    return live(a.cluster, a.trace)


if __name__ == "__main__":
    raise SystemExit(main())
