"""One phase of the serving placement bench: the driver set up, the watches and the sampler
started, every step's asks replayed (room first), the asks left to settle, then torn down."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

from e2e.bench.lib.cluster import GROUP, VERSION
from e2e.bench.lib.procs import cpu_seconds
from e2e.bench.lib.timing import epoch, say
from e2e.bench.lib.watch import watch_events
from e2e.bench.serving.observe import Observer
from e2e.bench.serving.phases import DRIVERS, Env
from e2e.bench.serving.report import PhaseResult, summarize
from e2e.bench.serving.workload import Workload

__all__ = ["Limited", "run_phase"]


class Limited:
    """kubeforge only, from an InferenceService watch: ``ScalingLimited=True`` with reason
    ``InsufficientCapacity`` episodes (one per transition into it, per service) and when each
    group (``service/index/attempt``, every distinct ``status.groups[].admittedAt`` seen: an
    index is admitted again after a scale-down) was admitted."""

    def __init__(self) -> None:
        self.state: dict[str, tuple] = {}
        self.out: dict = {"episodes": 0, "messages": [], "admitted": {}}

    def event(self, kind: str, obj: dict, now: float) -> None:
        """One InferenceService watch event (``kind`` unused: every object is read as it is)."""
        name = (obj.get("metadata") or {}).get("name")
        for g in (obj.get("status") or {}).get("groups") or []:
            if g.get("admittedAt"):  # a reused index is admitted again: keep every time seen
                key = f"{name}/{g.get('index')}/{g.get('attempt', 0)}"
                self.out["admitted"].setdefault(key, set()).add(epoch(g["admittedAt"]))
        c = next((x for x in (obj.get("status") or {}).get("conditions") or [] if x.get("type") == "ScalingLimited"), None)
        st = (c.get("status"), c.get("reason")) if c else None
        if st == ("True", "InsufficientCapacity") and self.state.get(name) != st:
            self.out["episodes"] += 1
            if len(self.out["messages"]) < 3:
                self.out["messages"].append(f"{name}: {c.get('message')}")
        self.state[name] = st


def run_phase(env: Env, name: str, wl: Workload, args, node_clique: dict, node_gpus: dict) -> PhaseResult:
    """Set the phase up, replay every step, let asks settle, tear down; returns what it saw."""
    from kubernetes import client

    ns = f"bench-{name}"
    opts = {"exclusive": args.baseline_exclusive} if name == "baseline" else {}
    driver = DRIVERS[name](env, ns, wl.services, wl.gangs, **opts)
    driver.setup()
    obs = Observer(driver.classify, node_clique, node_gpus)
    res = PhaseResult(name, obs, notes=env.notes)
    core, custom = client.CoreV1Api(env.api), client.CustomObjectsApi(env.api)
    stop = threading.Event()
    watches = [(lambda **kw: core.list_namespaced_pod(ns, **kw), obs.event, "pod")]
    limited = Limited() if name == "kubeforge" else None
    if limited:
        watches.append((lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", **kw),
                        limited.event, "inferenceservice"))
    threads = [threading.Thread(target=watch_events, args=(fn, cb, stop, res.restarts, f"{name} {w}", say), daemon=True)
               for fn, cb, w in watches]

    def sampler() -> None:
        while not stop.is_set():  # bounded: stop is set at the end of the phase
            obs.sample(time.monotonic())
            stop.wait(args.sample_interval)

    cpu0 = cpu_seconds(getattr(driver, "pid", None))
    for t in threads:
        t.start()
    time.sleep(1.0)
    obs.t0 = t0 = time.monotonic()
    threads.append(threading.Thread(target=sampler, daemon=True))
    threads[-1].start()
    _replay_steps(driver, obs, res, wl, args, t0)
    end = time.monotonic()
    obs.sample(end)
    obs.close(end)
    res.duration = end - t0
    res.limited = limited.out if limited else {}
    env.notes["operator_cpu_s"] = cpu_seconds(getattr(driver, "pid", None)) - cpu0
    stop.set()
    for t in threads:
        t.join(timeout=15)
    driver.teardown()
    res.notes = dict(env.notes)
    env.notes.clear()
    summarize(res)
    return res


def _replay_steps(driver, obs: Observer, res: PhaseResult, wl: Workload, args, t0: float) -> None:
    """Every step at its time (``--step-seconds`` apart from ``t0``): gangs leaving and services
    scaling down first, then the asks; then wait (``--settle`` s at most) for every ask to be served."""
    prev = {s.name: 0 for s in wl.services}

    def call(fn, *a) -> None:
        try:
            fn(*a)
        except Exception as e:  # noqa: BLE001 - counted and printed
            res.errors.append(f"{getattr(fn, '__name__', fn)}{a[:1]}: {str(e)[:200]}")

    with ThreadPoolExecutor(args.api_workers) as pool:
        for k in range(wl.steps):
            time.sleep(max(0.0, t0 + k * args.step_seconds - time.monotonic()))
            now = time.monotonic()
            downs, ups = [], []
            for g in wl.gangs:
                if g.leave == k:
                    obs.gang(g.name, False, now)
                    downs.append((driver.gang, g, False))
            for s in wl.services:
                r = wl.replicas[s.name][k]
                if r != prev[s.name]:
                    obs.ask(s.name, r, now)
                    (ups if r > prev[s.name] else downs).append((driver.scale, s, prev[s.name], r))
                    prev[s.name] = r
            for g in wl.gangs:
                if g.arrive == k:
                    obs.gang(g.name, True, now)
                    ups.append((driver.gang, g, True))
            for batch in (downs, ups):  # room first, then the asks
                wait([pool.submit(call, fn, *a) for fn, *a in batch], timeout=120)
            res.step_call_s.append(time.monotonic() - now)
        _settle(obs, res, wl, args, t0)


def _settle(obs: Observer, res: PhaseResult, wl: Workload, args, t0: float) -> None:
    """After the last step: until every ask is served (Ready, nothing partial) or ``--settle`` s."""
    deadline = t0 + wl.steps * args.step_seconds + args.settle
    res.ended = f"settle timeout ({args.settle:.0f} s after the last step)"
    time.sleep(max(0.0, t0 + wl.steps * args.step_seconds - time.monotonic()))
    while time.monotonic() < deadline:
        last = obs.samples[-1] if obs.samples else None
        if last and last["t"] > wl.steps * args.step_seconds and \
                all(last["ready"][x] == last["asked"][x] for x in ("serving", "training")) and not last["partial"]:
            res.ended = "every ask served"
            break
        time.sleep(0.5)
