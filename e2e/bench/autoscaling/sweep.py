"""Equal attainment: each autoscaler's cheapest setting that reaches the goal, found by sweeping
its main knob (and, when no value of the knob reaches it, a ``minReplicas`` floor).

A :class:`Family` is one autoscaler with its knob: a ladder of values from the least capacity
to the most, the documented default among them, and a factory. :func:`sweep` replays the
default, then bisects the ladder (assuming attainment grows along it): downwards for a cheaper
value that still reaches the goal, upwards for the first that does. When none does, it keeps
the default knob and bisects ``minReplicas`` (the floor a user sets when replicas take minutes
to start; from the cheapest static count, which reaches the goal alone), then tries the knob's
least-capacity value at that floor; the floor search also runs when the knob reaches the goal
only at more than the static count costs. The answer is the cheapest replay that reached the goal
among those run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from e2e.bench.autoscaling.baselines import KedaHpa, LlmdSaturation
from e2e.bench.autoscaling.dynamo import DYNAMO_KNOBS, DynamoLoad
from e2e.bench.autoscaling.result import Result
from e2e.bench.autoscaling.scalers import SLO, Bounds, KubeforgeQueue, KubeforgeSLO

__all__ = ["KUBEFORGE_ROWS", "Family", "Swept", "families", "sweep"]

Runner = Callable[[Any, int], Result]
"""``runner(scaler, min_replicas) -> Result``: one replay of the run (warm start at least the floor)."""


@dataclass(frozen=True)
class Family:
    """One autoscaler and its knob.

    Attributes:
        key: Short id (``--sweep`` names these).
        knob: What the knob is, as printed.
        values: The ladder, least capacity first.
        default: Index of the documented default in ``values``.
        make: ``make(value, bounds) -> scaler``.
        kubeforge: Whether it is a kubeforge row (the targets are judged for those).
    """

    key: str
    knob: str
    values: tuple
    default: int
    make: Callable[[Any, Bounds], Any]
    kubeforge: bool = False


@dataclass
class Swept:
    """What the sweep of one family found.

    Attributes:
        family: The family.
        default: The replay at the default setting.
        points: Every replay run, ``(value index, minReplicas) -> Result``.
        attained: Their attainment, same keys.
        best: The cheapest replay that reached the goal, or None.
        best_key: Its ``(value index, minReplicas)``.
    """

    family: Family
    default: Result
    points: dict = field(default_factory=dict)
    attained: dict = field(default_factory=dict)
    best: Result | None = None
    best_key: tuple | None = None

    def top(self) -> Result:
        """The replay of highest attainment (what "never reaches" reports)."""
        key = max(self.points, key=lambda k: (self.attained[k], -self.points[k].replica_seconds))
        return self.points[key]


#: kubeforge's rows beside its plain SLO row: issue 28's predictive scale-up, warm standby and
#: the peak hold (``scaleDown.peakHoldSeconds``, the API's share), as a user writes them
#: (``spec`` fields, API defaults for the rest): ``(key, name, spec)``.
#: A Seasonal row runs only where the run has a yesterday (``past``): without one it forecasts
#: by the trend, and would repeat the Trend row.
KUBEFORGE_ROWS = (
    ("kubeforge-trend", "+ predictive (Trend)", {"autoscaling": {"predictive": {"mode": "Trend"}}}),
    ("kubeforge-seasonal", "+ predictive (Seasonal)", {"autoscaling": {"predictive": {"mode": "Seasonal"}}}),
    ("kubeforge-standby", "+ standby 1", {"standby": {"replicas": 1}}),
    ("kubeforge-peak", "+ peak hold 2 h", {"autoscaling": {"scaleDown": {"peakHoldSeconds": 7200}}}),
)


def _seasonal(spec: dict) -> bool:
    return spec.get("autoscaling", {}).get("predictive", {}).get("mode") == "Seasonal"


def families(b: Bounds, slo: SLO, overrides: dict | None = None,
             extra: list[tuple[str, dict]] | None = None, past: tuple = (),
             rows: tuple = KUBEFORGE_ROWS) -> list[Family]:
    """Every autoscaler of a run with its knob, kubeforge SLO first.

    Args:
        b: Bounds of the run.
        slo: The run's SLO.
        overrides: ``--policy`` fields for kubeforge's rows.
        extra: ``(name, policy fields)`` per extra kubeforge row (``--kubeforge-row``).
        past: Yesterday's admission rate, for the predictive rows (see :class:`KubeforgeSLO`).
        rows: kubeforge's built-in rows beside the plain one (:data:`KUBEFORGE_ROWS`); the
            Seasonal ones only with a ``past``.
    """
    t = slo.ttft
    sizing = tuple(round(t * f, 3) for f in (1.5, 1.0, 0.75, 0.5, 0.35, 0.25, 0.15, 0.1))
    queue = (8.0, 4.0, 2.0, 1.0, 0.5, 0.25, 0.1)
    knob = f"slo.timeToFirstTokenSeconds the policy sizes for (p{slo.percentile})"
    base = "kubeforge SLO"
    out = [Family("kubeforge-slo", knob, sizing, 1, lambda v, bb: KubeforgeSLO(bb, slo, overrides, sizing=v, past=past),
                  kubeforge=True)]
    for key, label, spec in (r for r in rows if past or not _seasonal(r[2])):
        out.append(Family(key, knob, sizing, 1,
                          lambda v, bb, sp=spec, n=f"{base} {label}": KubeforgeSLO(bb, slo, overrides, sizing=v, name=n,
                                                                                 spec=sp, past=past), kubeforge=True))
    for name, fields_ in extra or []:
        out.append(Family(f"kubeforge:{name}", knob, sizing, 1,
                          lambda v, bb, f=fields_, n=name: KubeforgeSLO(bb, slo, {**(overrides or {}), **f}, sizing=v,
                                                                           name=n, past=past), kubeforge=True))
    out += [
        Family("kubeforge-queue", "targetPerReplica (waiting requests)", queue, queue.index(b.target) if b.target in queue else 1,
               lambda v, bb: KubeforgeQueue(bb, target=v)),
        Family("keda", "KEDA threshold (waiting requests per replica)", queue, queue.index(b.target) if b.target in queue else 1,
               lambda v, bb: KedaHpa(bb, threshold=v)),
        Family("llmd-hpa", "saturation thresholds x scale", (1.2, 1.0, 0.8, 0.6, 0.4, 0.25), 1,
               lambda v, bb: LlmdSaturation(bb, hpa=True, scale=v)),
        Family("llmd", "saturation thresholds x scale", (1.2, 1.0, 0.8, 0.6, 0.4, 0.25), 1,
               lambda v, bb: LlmdSaturation(bb, hpa=False, scale=v)),
        Family("dynamo", "utilization thresholds (up, down)", DYNAMO_KNOBS, 0,
               lambda v, bb: DynamoLoad(bb, up=v[0], down=v[1])),
    ]
    return out


def _bisect(lo: int, hi: int, ok: Callable[[int], bool]) -> None:
    """Find the smallest index in ``(lo, hi]`` for which ``ok`` holds, given ``ok(hi)`` is
    unknown and ``ok`` grows with the index; every probe is recorded by ``ok``."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid


def sweep(fam: Family, b: Bounds, runner: Runner, goal: float, ttft: float, floors: bool = True,
          floor_hint: int | None = None, floor_cost: float | None = None) -> Swept:
    """The cheapest setting of ``fam`` that reaches ``goal`` (see the module).

    Args:
        fam: The family.
        b: The run's bounds (``min_replicas`` is the floor's start).
        runner: Replays one scaler (see :data:`Runner`).
        goal: Attainment to reach, in (0, 1).
        ttft: The TTFT target, s.
        floors: Whether to try a ``minReplicas`` floor when no knob value reaches the goal.
        floor_hint: A floor likely to reach the goal (the cheapest static count): the floor
            search starts there instead of at ``maxReplicas``.
        floor_cost: That static count's replica-seconds: when the knob reaches the goal only
            at a higher cost, the floor search runs too (a floor may be the cheaper way).
    """
    points: dict[tuple[int, int], Result] = {}
    attained: dict[tuple[int, int], float] = {}

    def reaches(i: int, floor: int = b.min_replicas) -> bool:
        key = (i, floor)
        if key not in points:
            r = runner(fam.make(fam.values[i], replace(b, min_replicas=floor)), floor)
            if floor > b.min_replicas:
                r.knob = f"{r.knob} + minReplicas {floor}"
            points[key], attained[key] = r, r.attainment(ttft)
        return attained[key] >= goal

    lo_floor, d, n = b.min_replicas, fam.default, len(fam.values)
    if reaches(d):
        _bisect(-1, d, reaches)
    elif d + 1 < n and reaches(n - 1):
        _bisect(d, n - 1, reaches)
    knob_best = min((points[k].replica_seconds for k in points if attained[k] >= goal), default=None)
    if floors and lo_floor < b.max_replicas and (knob_best is None or (floor_cost is not None and knob_best > floor_cost)):
        hi = max(lo_floor + 1, min(b.max_replicas, floor_hint or b.max_replicas))
        while not reaches(d, hi) and hi < b.max_replicas:
            hi = min(b.max_replicas, hi + max(1, hi // 4))
        if reaches(d, hi):
            _bisect(lo_floor, hi, lambda f: reaches(d, f))
            floor = min(f for (i, f) in points if i == d and attained[(i, f)] >= goal)
            if d > 0:  # at that floor the knob's least-capacity value may do (fewer replicas above it)
                reaches(0, floor)
    out = Swept(fam, points[(d, lo_floor)], points, attained)
    ok = [(k, r) for k, r in points.items() if attained[k] >= goal]
    if ok:
        out.best_key, out.best = min(ok, key=lambda kr: kr[1].replica_seconds)
    return out
