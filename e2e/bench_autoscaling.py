"""Queue-driven autoscaling benchmark: kubeforge's autoscaler vs KEDA + HPA defaults on the Azure trace.

Two parts, both printed (and labelled):

1. SIMULATED (discrete-event replay, simulated time): the whole Azure LLM inference trace
   (code, 57 min, 8,818 requests) replayed at trace speed in simulated time (no compression:
   a 0.5 s step, exact queue events inside each step) through the model-server simulator's
   pure queue model, once per autoscaler, with the same replicas model (30 s from patch to a
   Ready replica), the same Prometheus scrape (every 5 s) and the same bounds (1..12
   replicas, target 4 waiting requests per replica):
   - kubeforge: ``kubeforge.autoscaling.decide`` with the InferenceService defaults
     (pollingIntervalSeconds 5, scale-up +4/15 s with panic mode, scale-down window 60 s,
     -1/30 s, tolerance 0.1);
   - KEDA + HPA defaults: KEDA Prometheus scaler polling every 30 s, HPA sync every 15 s,
     HPA tolerance 0.1, scale-up max(4 pods, 100%)/15 s, scale-down stabilization 300 s,
     100%/15 s. Two variants: the HPA reading the metric live at each sync (KEDA's default),
     and reading KEDA's value cached at its 30 s poll (``useCachedMetrics: true``).
2. LIVE (real time, kubeforge only): a slice of the same trace (minutes 8-16, quiet then a
   burst) time-compressed by 6x (80 s) through the simulator's HTTP /metrics, a real
   Prometheus (Debian's binary, scrape 1 s) and the real operator on the local control plane
   (kwok GPU nodes), with pollingIntervalSeconds 1 and a 10 s scale-down window. It shows the
   live path works; its figures are not comparable with part 1.

Figures: time from a queue spike to replicas patched (a spike starts when the waiting queue
exceeds target x replicas asked for, after being at or below it; it ends at the next upward
patch; spikes that drain before any patch are counted apart), request queue wait (arrival to
start of service), replica-minutes (replicas asked for, integrated over time: what the GPUs
are paid for), and scale direction reversals (Up followed by Down or the reverse).

Trace: Azure LLM inference trace 2023 (code), Azure ``AzurePublicDataset``, CC BY 4.0;
Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase Splitting", ISCA 2024.

Run: ``.venv/bin/python e2e/bench_autoscaling.py`` (``--no-live`` skips part 2).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from kubeforge.autoscaling import AutoscalerState, decide  # noqa: E402
from kubeforge.handlers.inference import policy_from_spec  # noqa: E402
from kubeforge.sim.modelserver import (  # noqa: E402
    AZURE_CODE_TRACE, QueueState, ServiceModel, advance, load_trace, percentile, trace_arrivals,
)

MODEL = ServiceModel(slots=4, base_seconds=0.5, prefill_tokens_per_second=2000.0, seconds_per_output_token=0.05)
MIN_R, MAX_R, TARGET = 1, 12, 4.0
STARTUP_S = 30.0
SCRAPE_S = 5.0
DT = 0.5


# --- autoscalers as decision loops -----------------------------------------------------------


class Kubeforge:
    name = "kubeforge (InferenceService defaults)"

    def __init__(self):
        self.policy = policy_from_spec({"minReplicas": MIN_R, "maxReplicas": MAX_R, "autoscaling": {"targetPerReplica": TARGET}})
        self.interval = 5.0  # pollingIntervalSeconds default
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

    def __init__(self, cached: bool):
        self.cached = cached
        self.name = "KEDA+HPA defaults" + (" (useCachedMetrics)" if cached else " (live metric)")
        self.sync, self.poll = 15.0, 30.0
        self.next_sync = 0.0
        self.next_poll = 0.0
        self.cached_value = 0.0
        self.recs: list[tuple[float, int]] = []
        self.events: list[tuple[float, int]] = []  # (time, replicas after) for the policies

    def tick(self, now: float, current: int, seen: float) -> int | None:
        if now >= self.next_poll:
            self.next_poll = now + self.poll
            self.cached_value = seen
        if now < self.next_sync:
            return None
        self.next_sync = now + self.sync
        m = self.cached_value if self.cached else seen
        ratio = m / (TARGET * current) if current else math.inf
        rec = current if abs(ratio - 1) <= 0.1 else math.ceil(m / TARGET)
        rec = max(MIN_R, min(MAX_R, rec))
        self.recs = [(t, r) for t, r in self.recs if t > now - 300] + [(now, rec)]
        if rec > current:  # scale up: stabilization 0, max(4 pods, 100%) per 15 s
            start = min([r for t, r in self.events if t > now - 15] + [current])
            desired = min(rec, max(start + 4, start * 2))
        elif rec < current:  # scale down: highest recommendation of the last 300 s, 100% per 15 s
            desired = max(r for _, r in self.recs)
            desired = min(desired, current)
        else:
            desired = current
        desired = max(MIN_R, min(MAX_R, desired))
        if desired != current:
            self.events.append((now, current))
        return desired


# --- the replay ------------------------------------------------------------------------------


@dataclass
class Result:
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


def replay(scaler, arrivals, end: float) -> Result:
    q = QueueState()
    r = Result(scaler.name)
    asked = MIN_R
    pods = [0.0] * MIN_R  # ready-at times
    seen, next_scrape = 0.0, 0.0
    last_dir = None
    feed, sp = spike_tracker(TARGET, MAX_R)
    i, t = 0, 0.0
    while t < end:
        t += DT
        j = i
        while j < len(arrivals) and arrivals[j].arrival <= t:
            j += 1
        ready = sum(1 for p in pods if p <= t - DT)
        advance(q, t, ready * MODEL.slots, arrivals[i:j])
        i = j
        if t >= next_scrape:
            next_scrape = t + SCRAPE_S
            seen = float(q.num_waiting)
        want = scaler.tick(t, asked, seen)
        up = False
        if want is not None and want != asked:
            last_dir, up = count_change(r, asked, want, last_dir)
            if want > asked:
                pods += [t + STARTUP_S] * (want - asked)
            else:
                pods = sorted(pods)[: want]  # the newest (not yet ready) go first
            asked = want
        feed(t, q.num_waiting, asked if not up else asked, up)
        r.replica_seconds += asked * DT
        r.max_replicas = max(r.max_replicas, asked)
    r.waits = q.waits
    r.spike_delays, r.absorbed = sp["delays"], sp["absorbed"]
    return r


def fmt(x: float, unit: str = "s") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1f}{unit}"


def table(results: list[Result]) -> None:
    head = f"{'autoscaler':44} {'spike->patch p50':>16} {'p95':>7} {'spikes':>7} {'wait p50':>9} {'wait p95':>9} {'replica-min':>12} {'reversals':>10} {'max':>4}"
    print(head)
    print("-" * len(head))
    for r in results:
        print(f"{r.name:44} {fmt(percentile(r.spike_delays, 50)):>16} {fmt(percentile(r.spike_delays, 95)):>7} "
              f"{len(r.spike_delays):>3}+{r.absorbed:<3} {fmt(percentile(r.waits, 50)):>9} {fmt(percentile(r.waits, 95)):>9} "
              f"{r.replica_seconds / 60:>12.1f} {r.reversals:>10} {r.max_replicas:>4}")


def simulated() -> None:
    trace = load_trace(AZURE_CODE_TRACE)
    arrivals = trace_arrivals(trace, MODEL, compression=1.0)
    end = trace[-1][0] + 600
    print("== SIMULATED: discrete-event replay in simulated time (trace speed, compression 1x) ==")
    print(f"trace: {len(trace)} requests over {trace[-1][0] / 60:.1f} min; replica: {MODEL.slots} concurrent requests, "
          f"mean service {sum(a.service for a in arrivals) / len(arrivals):.2f}s; "
          f"{STARTUP_S:.0f}s patch->Ready; scrape every {SCRAPE_S:.0f}s; replicas {MIN_R}..{MAX_R}, target {TARGET:.0f} waiting/replica")
    t0 = time.process_time()
    results = [replay(Kubeforge(), arrivals, end), replay(KedaHpa(cached=False), arrivals, end), replay(KedaHpa(cached=True), arrivals, end)]
    table(results)
    print(f"(spikes: answered by a patch + drained before any patch; replay CPU {time.process_time() - t0:.1f}s)")


# --- the live run ----------------------------------------------------------------------------


def live(cluster_name: str, compression: float = 6.0, start_min: float = 8, end_min: float = 16) -> int:
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
    apps = client.AppsV1Api(config.new_client_from_config(config_file=c.kubeconfig))
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
                return int(apps.read_namespaced_deployment(name="chat", namespace=ns).spec.replicas or 0)
            except Exception:  # noqa: BLE001
                return None

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (asked() == 1 and sim.snapshot(ns, "chat")["ready"] == 1):
            time.sleep(0.5)
        arrivals = trace_arrivals(load_trace(AZURE_CODE_TRACE), MODEL, compression, start=start_min * 60, end=end_min * 60,
                                  offset=sim.clock() + 1)
        sim.replay(ns, "chat", arrivals)
        r = Result("kubeforge LIVE (real Prometheus + operator)")
        feed, sp = spike_tracker(TARGET, 8)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-live", action="store_true", help="skip the live run (no cluster, no Prometheus)")
    ap.add_argument("--cluster", default=os.environ.get("KUBEFORGE_BENCH_CLUSTER", "kubeforge-bench"))
    a = ap.parse_args()
    print("Trace: Azure LLM inference trace 2023 (code), AzurePublicDataset, CC BY 4.0; "
          "Patel et al., \"Splitwise\", ISCA 2024.\n")
    simulated()
    return 0 if a.no_live else live(a.cluster)


if __name__ == "__main__":
    raise SystemExit(main())
