"""Autoscaling benchmark: kubeforge's SLO autoscaler against KEDA + HPA, llm-d's and Dynamo's,
on the same arrivals, in simulated time (then a live part on the local cluster).

``python -m e2e.bench.autoscaling [--help]`` (``make bench-autoscaling``). Modules: the command
and the runs (:mod:`~e2e.bench.autoscaling.cli`), the arrival streams
(:mod:`~e2e.bench.autoscaling.arrivals`), the replay (:mod:`~e2e.bench.autoscaling.replay`),
the autoscalers (:mod:`~e2e.bench.autoscaling.scalers`), the figures
(:mod:`~e2e.bench.autoscaling.report`), the live part (:mod:`~e2e.bench.autoscaling.live`).
The names below are the bench's API (the tests use them).
"""

from kubeforge.sim.modelserver import Request

from e2e.bench.autoscaling.arrivals import (
    DAY_S, MODEL, NIGHT_FRACTION, PEAK_HOUR, cold_ramp, day_arrivals, diurnal_fraction, superpose, trace_requests,
)
from e2e.bench.autoscaling.cli import DEFAULT_TRACE, RUNS, main, run, scalers
from e2e.bench.autoscaling.replay import Result, replay
from e2e.bench.autoscaling.report import static_reference, targets
from e2e.bench.autoscaling.scalers import SLO, Bounds, kubeforge_policy

__all__ = [
    "DAY_S", "DEFAULT_TRACE", "MODEL", "NIGHT_FRACTION", "PEAK_HOUR", "RUNS", "SLO", "Bounds", "Request", "Result",
    "cold_ramp", "day_arrivals", "diurnal_fraction", "kubeforge_policy", "main", "replay", "run", "scalers",
    "static_reference", "superpose", "targets", "trace_requests",
]
