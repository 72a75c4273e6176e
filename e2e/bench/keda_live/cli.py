"""Live autoscaling on the same compressed trace segment: kubeforge against the real KEDA + HPA.

Minutes 8-16 of the trace (quiet, then a burst), time-compressed 6x, are replayed through the
model-server simulator on the sim cluster, once under kubeforge's operator (the autoscaling
bench's live InferenceService: queue-depth mode, target 4 waiting a replica, replicas 1..8,
polling 1 s, scale-down window 10 s) and once under KEDA (built from the Go module proxy by
``hack/build-keda.sh``) with kube-controller-manager's HPA scaling a Deployment of the same
simulated model servers (a ScaledObject with a ``prometheus`` trigger on
``vllm:num_requests_waiting``, threshold 4, the same bounds, polling and scale-down; the HPA's
defaults for scale-up; ``--kubeforge-scale-up hpa-default`` gives kubeforge the same, 4 pods per
15 s, instead of its own 1 per 10 s; ``--kubeforge-mode slo`` gives it its latency SLO mode instead of
queue depth, for the TTFT target the attainment is judged by). Both read the same Debian
Prometheus, scraping every second.

Printed per system (trace time): TTFT attainment over all requests (aborted and unfinished are
misses), GPU replica-minutes (the pods that exist), aborted requests, TTFT and queue-wait
percentiles, the scale timeline, each rise (queue beyond what is asked for -> asks more) and
kubeforge's decision interval, then issue 28's live target: kubeforge >= KEDA + HPA's
attainment at <= its replica-minutes, 0 aborted. ``--json FILE`` writes the figures for
``python -m e2e.bench.autoscaling --keda-live FILE``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
from datetime import datetime, timezone
from pathlib import Path

from e2e.bench.keda_live.report import report
from e2e.bench.keda_live.run import MODES, SCALE_UP, SLO_WINDOW_DEFAULT, Segment, keda_settings, run_system, slo_spec
from e2e.bench.keda_live.stack import BUILD_HINT, KEDA_VERSION, KedaStack, keda_bin
from e2e.bench.keda_live.summary import Figures, dump, verdict
from e2e.bench.lib.args import choice_list
from e2e.bench.lib.cluster import down, open_api
from e2e.bench.lib.timing import say
from e2e.bench.lib.traces import AZURE_CODE, default_trace

__all__ = ["SYSTEMS", "main", "parse_args"]

SYSTEMS = ("kubeforge", "keda")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``); ``systems`` becomes a list."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.keda_live", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="keda-live", help="local cluster name (created, then taken down)")
    ap.add_argument("--trace", type=Path, default=default_trace(AZURE_CODE), help="trace CSV")
    ap.add_argument("--start-min", type=float, default=8.0, help="first trace minute replayed")
    ap.add_argument("--end-min", type=float, default=16.0, help="trace minute the replay stops at")
    ap.add_argument("--compression", type=float, default=6.0, help="trace seconds per wall second")
    ap.add_argument("--ttft", type=float, default=2.0, help="TTFT target of the attainment, trace seconds")
    ap.add_argument("--polling", type=int, default=1,
                    help="KEDA pollingInterval, s (kubeforge's live spec polls every 1 s)")
    ap.add_argument("--hpa-sync-period", default="1s",
                    help="kube-controller-manager --horizontal-pod-autoscaler-sync-period (default 15s upstream; "
                         "1s here, matching kubeforge's 1 s polling on a 6x-compressed trace)")
    ap.add_argument("--kubeforge-scale-up", choices=tuple(SCALE_UP), default="spec",
                    help="kubeforge's autoscaling.scaleUp: 'spec' leaves the live spec's (kubeforge's default, "
                         "1 per 10 s, lifted in panic mode); 'hpa-default' gives it the HPA's default that the KEDA "
                         "side runs with (4 pods per 15 s: max(100%%, 4 pods) within 1..8)")
    ap.add_argument("--kubeforge-mode", choices=MODES, default="queue",
                    help="kubeforge's autoscaling mode: 'queue' (the live spec's queue depth, 4 waiting a replica: "
                         "KEDA's signal and threshold); 'slo' (autoscaling.slo: TTFT <= --ttft at --slo-percentile, "
                         "on the wall clock: --ttft / --compression s, window --slo-window / --compression s)")
    ap.add_argument("--slo-percentile", type=int, default=99,
                    help="with --kubeforge-mode slo: the percentile of the TTFT target (the autoscaling bench's "
                         "SLO row: 99)")
    ap.add_argument("--slo-window", type=float, default=SLO_WINDOW_DEFAULT,
                    help="with --kubeforge-mode slo: slo.windowSeconds in trace seconds (the API's default 60; "
                         "divided by --compression, at least 10 wall s)")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, in run order: kubeforge, keda")
    ap.add_argument("--json", type=Path, default=None, help="write the figures there (for bench-autoscaling --keda-live)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    a = ap.parse_args(argv)
    a.systems = choice_list(ap, "--systems", a.systems, SYSTEMS)
    if not a.compression > 0 or not a.end_min > a.start_min or not a.ttft > 0 or a.polling < 1:
        ap.error("need --compression > 0, --end-min > --start-min, --ttft > 0 and --polling >= 1")
    if not 50 <= a.slo_percentile <= 99 or not a.slo_window > 0:
        ap.error("need 50 <= --slo-percentile <= 99 (the API's range) and --slo-window > 0")
    a.slo = slo_spec(a.ttft, a.compression, a.slo_percentile, a.slo_window) if a.kubeforge_mode == "slo" else None
    if not a.trace.is_file():
        ap.error(f"--trace {a.trace}: no such file")
    return a


def _scale_up_words(choice: str) -> str:
    """``--kubeforge-scale-up``'s choice in words."""
    up = SCALE_UP[choice]
    if up is None:
        return "kubeforge's default (1 per 10 s, lifted in panic mode: queue > 8 x replicas x target)"
    return (f"{up['maxStep']} per {up['periodSeconds']} s, stabilization {up['stabilizationWindowSeconds']} s "
            f"(--kubeforge-scale-up {choice}: the HPA's default; panic mode as always)")


def _kubeforge_words(a: argparse.Namespace) -> str:
    """kubeforge's InferenceService in words: its mode, bounds, polling and scaling rules."""
    if a.slo is None:
        mode = "VLLMWaiting, targetPerReplica 4"
    else:
        mode = (f"SLO mode, slo {{timeToFirstTokenSeconds: {a.slo['timeToFirstTokenSeconds']:g} (= {a.ttft:g} s of "
                f"trace time / {a.compression:g}), percentile: {a.slo['percentile']}, windowSeconds: "
                f"{a.slo['windowSeconds']} (= {a.slo_window:g} s of trace time)}}, no targetPerReplica")
    up = ("none: SLO mode goes to the queue model's count in one step (scaleUp.maxStep is queue-depth mode's)"
          if a.slo is not None else _scale_up_words(a.kubeforge_scale_up))
    return ("InferenceService (e2e.bench.autoscaling.live.SERVICE): " + mode + ", replicas 1..8, "
            "pollingIntervalSeconds 1, scaleDown window 10 s, -2 every 2 s; scaleUp limit " + up)


def _settings(a: argparse.Namespace) -> dict:
    """The choices, in words, as printed and written to the JSON."""
    k = keda_settings(a.polling)
    sd = k["scaleDown"]
    return {
        "keda_version": KEDA_VERSION,
        "kubeforge": _kubeforge_words(a),
        "keda": f"ScaledObject: prometheus trigger sum(vllm:num_requests_waiting{{namespace,service}}), threshold "
                f"{k['threshold']:g} (AverageValue), minReplicaCount {k['minReplicaCount']}, maxReplicaCount "
                f"{k['maxReplicaCount']}, pollingInterval {k['pollingInterval']} s, cooldownPeriod 300 s (KEDA's "
                f"default; only used for scaling to 0, which minReplicaCount 1 rules out)",
        "hpa": f"behavior.scaleDown stabilizationWindowSeconds {sd['stabilizationWindowSeconds']}, Pods "
               f"{sd['maxStep']} per {sd['periodSeconds']} s (from kubeforge's spec); scaleUp: the HPA's default "
               f"(no stabilization, max(100%, 4 pods) per 15 s); tolerance 10% (default); sync period "
               f"{a.hpa_sync_period} (kube-controller-manager)",
        "prometheus": "Debian's prometheus, scrape_interval 1s, one per run",
    }


def _run(a: argparse.Namespace, c, results: dict) -> None:
    """Start the cluster (and KEDA when asked for) and run each system in order."""
    c.up(None, log=say, extra_args=(f"kube-controller-manager=horizontal-pod-autoscaler-sync-period={a.hpa_sync_period}",))
    api = open_api(c, 8)
    seg = Segment(a.trace, a.start_min, a.end_min, a.compression, a.ttft)
    stack = None
    for s in a.systems:
        try:
            if s == "keda":
                stack = KedaStack(c, keda_bin())
                stack.install()
                stack.start()
                say(f"KEDA v{KEDA_VERSION}: operator and metrics adapter up; external.metrics.k8s.io Available")
            results[s] = run_system(c, api, s, seg, a.polling, stack, a.kubeforge_scale_up, a.slo)
        except Exception as e:  # noqa: BLE001 - KedaError, ClusterError, an API error: the other system's figures stand
            say(f"{s}: run failed: {type(e).__name__}: {e}")
        finally:
            if s == "keda" and stack is not None:
                stack.stop()


def main(argv: list[str] | None = None) -> int:
    """Set the cluster up, run each system, print the figures; returns 0 (2: nothing could run)."""
    a = parse_args(argv)
    if "keda" in a.systems and keda_bin() is None:
        say(f"skipping KEDA: {BUILD_HINT}")
        a.systems.remove("keda")
    if not a.systems:
        return 2
    from kubeforge.sim.cluster import Cluster

    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    machine = f"machine: {os.cpu_count()} CPUs, load average (1 min) {os.getloadavg()[0]:.1f} at the start"
    print(f"live autoscaling, kubeforge against real KEDA v{KEDA_VERSION} + HPA: systems {', '.join(a.systems)}; "
          f"cluster {a.cluster}; {machine}")
    c = Cluster(a.cluster)
    results: dict = {}
    try:
        _run(a, c, results)
    except RuntimeError as e:
        say(f"the run stopped: {type(e).__name__}: {e}")
    finally:
        down(c, a.keep)
    seg = {"trace": a.trace.name, "start_min": a.start_min, "end_min": a.end_min, "compression": a.compression}
    kf, ke = results.get("kubeforge"), results.get("keda")
    f = Figures(kf, ke, verdict(kf, ke), seg, _settings(a), when,
                f"{machine}, {os.getloadavg()[0]:.1f} at the end")
    report(f)
    if a.json:
        dump(f, a.json)
        print(f"figures written to {a.json}")
    return 0 if results else 1
