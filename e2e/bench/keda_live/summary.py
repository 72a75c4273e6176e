"""The figures of the live KEDA comparison (pure): one system's segment from what the simulator
and the cluster showed, the verdict against issue 28's live target, and the JSON that ``python
-m e2e.bench.autoscaling --keda-live FILE`` reads back.

Every time here is **trace time**: the segment is replayed time-compressed, so a wall second
counts ``compression`` trace seconds (TTFTs, replica-minutes, queue waits alike).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from e2e.bench.keda_live.onsets import onsets, poll_cadence
from e2e.bench.lib.jsonfile import dump_figures
from e2e.bench.lib.stats import percentile

__all__ = ["Figures", "Sample", "SystemFigures", "by_arrival", "dump", "load_figures", "replica_seconds",
           "system_figures", "verdict"]


@dataclass(frozen=True)
class Sample:
    """What one look at the running segment saw.

    Attributes:
        t: wall seconds since the replay began.
        replicas: the service's pods that exist (not being deleted): the GPUs held.
        ready: the routable (Ready) replicas.
        asked: the replicas the autoscaler asks for (kubeforge's ``status.desiredReplicas``,
            the Deployment's ``spec.replicas`` that the HPA sets); None when unreadable.
        waiting: the simulator's queue at the look (what the metric will read at the next
            scrape), requests; None when not taken.
        seen: the queue the autoscaler last read (kubeforge's ``status.lastMetricValue``; the
            HPA's ``currentMetrics`` average value times its current replicas); None when unknown.
        decisions: kubeforge's operator's autoscaler decisions so far
            (``kubeforge_autoscaler_decisions_total``, all directions); None for KEDA or unread.
    """

    t: float
    replicas: int
    ready: int
    asked: int | None
    waiting: int | None = None
    seen: float | None = None
    decisions: float | None = None


def replica_seconds(samples: list[Sample], attr: str = "replicas") -> float:
    """Wall replica-seconds of ``attr`` over the samples (left Riemann sum: each sample's value held
    until the next; the last one adds nothing). Samples must be in time order; None counts as 0."""
    total = 0.0
    for a, b in zip(samples, samples[1:]):
        total += (getattr(a, attr) or 0) * max(0.0, b.t - a.t)
    return total


def _changes(samples: list[Sample]) -> tuple[int, int]:
    """``(changes of the replicas asked for, reversals: an up followed by a down or the reverse)``."""
    asked = [s.asked for s in samples if s.asked is not None]
    changes, last_dir, reversals = 0, 0, 0
    for a, b in zip(asked, asked[1:]):
        if a != b:
            changes += 1
            d = 1 if b > a else -1
            if last_dir and d != last_dir:
                reversals += 1
            last_dir = d
    return changes, reversals


@dataclass
class SystemFigures:
    """One system's run of the segment (trace time).

    Attributes:
        system: ``kubeforge`` or ``keda``.
        requests: arrivals replayed.
        completed: requests that finished.
        aborted: requests whose replica's pod was deleted while holding them.
        attainment: share of ALL arrivals whose TTFT was within the SLO (aborted and unfinished
            requests are misses), 0..1.
        ttft_slo: the SLO, s.
        replica_minutes: GPU replica-minutes: the service's existing pods over the segment.
        asked_replica_minutes: the same of the replicas asked for.
        ttft_p50, ttft_p99, wait_p95: over completed requests, s.
        max_replicas: most pods at once.
        changes, reversals: of the replicas asked for.
        load: the machine's 1-minute load average at the start and at the end of the run.
        timeline: ``(t, asked, replicas, ready)`` at each change, t in trace seconds.
        onsets: each rise of the queue past what the replicas asked for carry, and how long
            the system took to ask for more (:func:`e2e.bench.keda_live.onsets.onsets`).
        polls: kubeforge's decisions' cadence (:func:`e2e.bench.keda_live.onsets.poll_cadence`),
            None for KEDA.
        looks: every look, ``(t trace s, asked, pods, ready, queue, seen, decisions)`` (for the
            JSON: what the rises and the cadence were measured from).
        notes: kubeforge's ``(t trace s, "ScalingActive: ...; SLOMet: ...")`` each time its
            decision's sentence changed (SLO mode: the queue model's numbers); empty for KEDA.
        by_arrival: ``(bin start, arrivals, within the TTFT target)`` per bin of arrival time,
            trace s since the segment's start (:func:`by_arrival`): where the misses are.
    """

    system: str
    requests: int
    completed: int
    aborted: int
    attainment: float
    ttft_slo: float
    replica_minutes: float
    asked_replica_minutes: float
    ttft_p50: float
    ttft_p99: float
    wait_p95: float
    max_replicas: int
    changes: int
    reversals: int
    load: tuple[float, float] = (float("nan"), float("nan"))
    timeline: list[tuple[float, int | None, int, int]] = field(default_factory=list)
    onsets: list[dict] = field(default_factory=list)
    polls: dict | None = None
    looks: list[tuple] = field(default_factory=list)
    notes: list[tuple[float, str]] = field(default_factory=list)
    by_arrival: list[tuple[float, int, int]] = field(default_factory=list)


def by_arrival(arrived: list[float], met: list[float], bin_seconds: float = 30.0) -> list[tuple[float, int, int]]:
    """Arrivals and those within the TTFT target per bin of arrival time.

    Args:
        arrived: every request's arrival, trace s since the segment's start (>= 0).
        met: the arrival of each request whose TTFT was within the target, the same clock.
        bin_seconds: the bins' width, trace s (> 0).

    Returns:
        ``(bin start, arrivals, met)`` for every bin from 0 to the last arrival's, in order.

    Raises:
        ValueError: ``bin_seconds`` is not positive.
    """
    if not bin_seconds > 0:
        raise ValueError(f"bin_seconds must be positive, got {bin_seconds}")
    n = int(max(arrived, default=0.0) // bin_seconds) + 1 if arrived else 0
    counts, ok = [0] * n, [0] * n
    for t in arrived:
        counts[min(n - 1, max(0, int(t // bin_seconds)))] += 1
    for t in met:
        if n:
            ok[min(n - 1, max(0, int(t // bin_seconds)))] += 1
    return [(round(i * bin_seconds, 1), counts[i], ok[i]) for i in range(n)]


def system_figures(system: str, requests: int, ttfts: list[float], waits: list[float], completed: int, aborted: int,
                   samples: list[Sample], compression: float, ttft_slo: float,
                   load: tuple[float, float] = (float("nan"), float("nan")), target: float = 4.0,
                   tolerance: float = 0.1) -> SystemFigures:
    """One system's figures.

    Args:
        system: its name.
        requests: arrivals replayed (the attainment's denominator).
        ttfts, waits: per completed request, simulator seconds (wall; multiplied by ``compression``).
        completed, aborted: the simulator's counts.
        samples: the looks taken during the segment, in time order (wall ``t``).
        compression: trace seconds per wall second (> 0).
        ttft_slo: TTFT target, trace seconds.
        load: machine load at the start and the end.
        target, tolerance: the queue a replica carries and the band around it (for the onsets).

    Raises:
        ValueError: ``compression`` is not positive.
    """
    if not compression > 0:
        raise ValueError(f"compression must be positive, got {compression}")
    tt = [x * compression for x in ttfts]
    ok = sum(1 for x in tt if x <= ttft_slo)
    changes, reversals = _changes(samples)
    timeline, last = [], None
    for s in samples:
        key = (s.asked, s.replicas, s.ready)
        if key != last:
            timeline.append((round(s.t * compression, 1), s.asked, s.replicas, s.ready))
            last = key
    return SystemFigures(
        system, requests, completed, aborted, ok / requests if requests else float("nan"), ttft_slo,
        replica_seconds(samples) * compression / 60, replica_seconds(samples, "asked") * compression / 60,
        percentile(tt, 50), percentile(tt, 99), percentile([w * compression for w in waits], 95),
        max((s.replicas for s in samples), default=0), changes, reversals, load, timeline,
        [o.as_dict() for o in onsets(samples, target, tolerance, compression)], poll_cadence(samples),
        [(round(s.t * compression, 1), s.asked, s.replicas, s.ready, s.waiting, s.seen, s.decisions) for s in samples])


def verdict(kubeforge: SystemFigures | None, keda: SystemFigures | None) -> bool | None:
    """Issue 28's live target: kubeforge's attainment >= KEDA + HPA's, at <= its replica-minutes,
    0 aborted. None when either run is missing."""
    if kubeforge is None or keda is None:
        return None
    return (kubeforge.attainment >= keda.attainment and kubeforge.replica_minutes <= keda.replica_minutes
            and kubeforge.aborted == 0)


@dataclass
class Figures:
    """The whole run, as written to ``--json``.

    Attributes:
        kubeforge, keda: each system's figures (None: not run, or it failed).
        met: :func:`verdict`.
        segment: what was replayed (trace, minutes, compression).
        settings: what each system was configured with (the choices, in words).
        when: UTC time of the run, ISO 8601.
        machine: CPUs and what else was said about the machine.
    """

    kubeforge: SystemFigures | None
    keda: SystemFigures | None
    met: bool | None
    segment: dict
    settings: dict
    when: str
    machine: str


def dump(f: Figures, path: Path) -> None:
    """Write ``f`` as JSON to ``path`` (NaN written as null)."""
    dump_figures(f, path)


def _triple(d, name: str, path: Path) -> tuple[float, float, int] | None:
    if d is None:
        return None
    try:
        a, r, ab = d["attainment"], d["replica_minutes"], d["aborted"]
        if a is None or r is None or ab is None:
            return None
        return float(a), float(r), int(ab)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: {name} has no usable attainment / replica_minutes / aborted ({e})") from e


def load_figures(path: Path) -> tuple[tuple[float, float, int] | None, tuple[float, float, int] | None]:
    """``(kubeforge, keda)`` as ``(attainment 0..1, GPU replica-minutes, aborted)`` from a ``--json``
    file; None for a system it has no figures of.

    Raises:
        OSError: the file cannot be read.
        ValueError: not JSON of this bench (``json.JSONDecodeError`` is one).
    """
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or "kubeforge" not in data or "keda" not in data:
        raise ValueError(f"{path}: not the JSON of python -m e2e.bench.keda_live --json (no kubeforge / keda)")
    return _triple(data["kubeforge"], "kubeforge", path), _triple(data["keda"], "keda", path)
