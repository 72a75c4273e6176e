"""Autoscaling benchmark: kubeforge's autoscaler against KEDA + HPA, llm-d's and Dynamo's, an
oracle with perfect foresight and the cheapest static count, on the same arrivals, in simulated
time (then a live part on the local cluster).

``python -m e2e.bench.autoscaling [--help]`` (``make bench-autoscaling``). Modules: the command
(:mod:`~e2e.bench.autoscaling.cli`), one run (:mod:`~e2e.bench.autoscaling.runs`), the arrival
streams (:mod:`~e2e.bench.autoscaling.arrivals`), the start times
(:mod:`~e2e.bench.autoscaling.starts`), the replay (:mod:`~e2e.bench.autoscaling.replay`, with
:mod:`~e2e.bench.autoscaling.prom` and :mod:`~e2e.bench.autoscaling.result`), the autoscalers
(:mod:`~e2e.bench.autoscaling.scalers`, :mod:`~e2e.bench.autoscaling.baselines`,
:mod:`~e2e.bench.autoscaling.dynamo`), the oracle (:mod:`~e2e.bench.autoscaling.oracle`), the
causal reference (:mod:`~e2e.bench.autoscaling.causal`), the equal-attainment sweep
(:mod:`~e2e.bench.autoscaling.sweep`), the tables and targets (:mod:`~e2e.bench.autoscaling.report`,
:mod:`~e2e.bench.autoscaling.compare`), the figure (:mod:`~e2e.bench.autoscaling.figure`), the live
part (:mod:`~e2e.bench.autoscaling.live`).
The names below are the bench's API (the tests use them).
"""

from kubeforge.sim.modelserver import Request

from e2e.bench.autoscaling.arrivals import (
    DAY_S, MODEL, NIGHT_FRACTION, PEAK_HOUR, cold_ramp, day_arrivals, diurnal_fraction, step_stream, superpose,
    trace_requests,
)
from e2e.bench.autoscaling.cli import DEFAULT_TRACE, RUNS, main, scalers
from e2e.bench.autoscaling.oracle import MissCurves, OracleResult, allocate, oracle, schedule
from e2e.bench.autoscaling.replay import Result, replay
from e2e.bench.autoscaling.report import static_reference, targets
from e2e.bench.autoscaling.runs import RunOptions, run, warm_replicas
from e2e.bench.autoscaling.scalers import SLO, Bounds, kubeforge_policy
from e2e.bench.autoscaling.starts import StartTimes
from e2e.bench.autoscaling.sweep import Family, Swept, families, sweep

__all__ = [
    "DAY_S", "DEFAULT_TRACE", "MODEL", "NIGHT_FRACTION", "PEAK_HOUR", "RUNS", "SLO", "Bounds", "Family", "MissCurves",
    "OracleResult", "Request", "Result", "RunOptions", "StartTimes", "Swept", "allocate", "cold_ramp", "day_arrivals",
    "diurnal_fraction", "families", "kubeforge_policy", "main", "oracle", "replay", "run", "scalers", "schedule",
    "static_reference", "step_stream", "superpose", "sweep", "targets", "trace_requests", "warm_replicas",
]
