"""Live multi-node group start: create -> every pod of each replica group Ready, kubeforge's
InferenceService groups against the real LeaderWorkerSet, on the same small sim fleet.

Each round creates one object with ``--replicas`` groups of ``--size`` pods x ``--gpus`` GPUs,
each group inside one NVLink domain (``nvidia.com/gpu.clique``), and times every group from the
create call (this machine's monotonic clock, just before the API call) to the moment the pod
watch (local arrival times, not the API server's 1-second timestamps) shows all its pods Ready;
then deletes it and waits until its pods are gone. Rounds alternate between the systems
(kubeforge, LWS, LWS, kubeforge, ...) so that the machine's load falls on both alike.

- kubeforge: an InferenceService, tensor 8 x pipeline 2, minReplicas = maxReplicas, topology
  Required at ``nvlink``; the operator is started before each of its rounds and stopped after.
- LWS v0.7.0, the real manager (``make peers``): a LeaderWorkerSet of size 2 with
  ``exclusive-topology: nvidia.com/gpu.clique``; kubeforge's operator is stopped meanwhile.

Printed: p50 / p95 per system, kubeforge's p50 over LWS's against issue 28's target (at most
1.5x), kubeforge's start split by phase (create -> admitted (``status.groups[].admittedAt``
seen) -> pods created -> bound -> all Ready, each from the create call) and LWS's pods
created / bound / Ready, the machine's load. Nothing is asserted. ``--json FILE`` writes the
figures for ``python -m e2e.bench.autoscaling --lws-live FILE``.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from e2e.bench.lib.args import choice_list
from e2e.bench.lib.cluster import apply_crds, apply_fleet, down, fleet_capacity, make_namespace, open_api
from e2e.bench.lib.source import ROOT
from e2e.bench.lib.timing import Abort, say, wait_until
from e2e.bench.lib.watch import watch_events
from e2e.bench.lws_live.report import report
from e2e.bench.lws_live.summary import dump, figures
from e2e.bench.lws_live.systems import KubeforgeGroups, LwsGroups
from e2e.bench.lws_live.track import Tracker
from e2e.peers import BUILD_HINT, peers_bin

__all__ = ["main", "parse_args"]

SYSTEMS = ("kubeforge", "lws")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``); ``systems`` becomes a list."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.lws_live", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="kubeforge-bench-lws", help="local cluster name (created, then taken down)")
    ap.add_argument("--fleet", default=str(ROOT / "e2e/fleets/lws-8.yaml"))
    ap.add_argument("--rounds", type=int, default=5, help="rounds per system")
    ap.add_argument("--replicas", type=int, default=4, help="replica groups per round")
    ap.add_argument("--size", type=int, default=2, help="pods per group")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per pod")
    ap.add_argument("--timeout", type=float, default=120, help="seconds to wait for a round's groups to be Ready")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated: kubeforge, lws")
    ap.add_argument("--json", type=Path, default=None, help="write the figures there (for bench-autoscaling --lws-live)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    a = ap.parse_args(argv)
    a.systems = choice_list(ap, "--systems", a.systems, SYSTEMS)
    if min(a.rounds, a.replicas, a.size, a.gpus) < 1:
        ap.error("--rounds, --replicas, --size and --gpus must be at least 1")
    return a


def round_order(rounds: int, systems: list[str]) -> list[tuple[int, str]]:
    """``(round, system)`` in run order: each round's systems, reversed every other round
    (A B, B A, A B, ...), so that neither always runs first."""
    out = []
    for i in range(rounds):
        out += [(i, s) for s in (systems if i % 2 == 0 else systems[::-1])]
    return out


def _round(sys_, tracker: Tracker, i: int, args) -> None:
    """One round: get ready, create, wait for every group Ready, delete, wait until gone."""
    name = f"{sys_.system}-r{i + 1}"
    sys_.before_round()
    time.sleep(1.0)  # the watches and the controller settle
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    tracker.start(sys_.system, sys_.ns, name, args.replicas, args.size, t0)
    sys_.create(name)
    ok = wait_until(lambda: tracker.all_ready(sys_.ns, name), args.timeout, f"{sys_.system}: {name}'s groups Ready",
                    0.2)
    ts = [g.since_create("ready") for g in tracker.of(sys_.ns, name)]
    shown = ", ".join(f"{t:.2f}" if t is not None else "-" for t in ts)
    t1 = time.monotonic()
    if not sys_.delete(name, 180):
        raise Abort(f"{sys_.system}: {name} did not go within 180 s")
    say(f"{sys_.system} round {i + 1}: groups Ready after {shown} s{'' if ok else ' (timed out)'} (load {load:.1f}); "
        f"deleted and gone in {time.monotonic() - t1:.1f} s")
    sys_.after_round()


def _watch(api, namespaces: dict[str, str], tracker: Tracker, stop: threading.Event, restarts: dict) -> list:
    """Start the pod watches (one per namespace) and kubeforge's InferenceService watch."""
    from kubernetes import client

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    watches = [((lambda ns: lambda **kw: core.list_namespaced_pod(ns, **kw))(ns), tracker.pod_event, f"{s} pods")
               for s, ns in namespaces.items()]
    if "kubeforge" in namespaces:
        ns = namespaces["kubeforge"]
        watches.append((lambda **kw: custom.list_namespaced_custom_object("kubeforge.io", "v1alpha1", ns,
                                                                          "inferenceservices", **kw),
                        tracker.service_event, "inferenceservices"))
    threads = [threading.Thread(target=watch_events, args=(fn, cb, stop, restarts, what, say), daemon=True)
               for fn, cb, what in watches]
    for t in threads:
        t.start()
    return threads


def main(argv: list[str] | None = None) -> int:
    """Set the cluster up, run the rounds, print the figures; returns 0 (2: nothing to run)."""
    args = parse_args(argv)
    if "lws" in args.systems and (peers_bin() is None or not (peers_bin() / "lws").exists()):
        say(f"skipping LWS: {BUILD_HINT}")
        args.systems.remove("lws")
    if not args.systems:
        return 2
    from kubeforge.sim.cluster import Cluster
    from kubeforge.sim.fleet import load_fleet

    fleet = load_fleet(args.fleet)
    capacity, per = fleet_capacity(fleet)
    print(f"live multi-node group start: {fleet.node_count} nodes x {per} GPUs ({args.fleet}); {args.rounds} rounds "
          f"per system of {args.replicas} groups x {args.size} pods x {args.gpus} GPUs, each inside one NVLink "
          f"domain; systems: {', '.join(args.systems)}; machine: {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}")
    if args.replicas * args.size * args.gpus > capacity:
        say(f"{args.replicas} groups need {args.replicas * args.size * args.gpus} GPUs; the fleet has {capacity}")
        return 2
    c = Cluster(args.cluster)
    tracker, stop, restarts = Tracker(), threading.Event(), {}
    load0, when = os.getloadavg()[0], datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    systems = {}
    try:
        c.up(None, log=say)
        api = open_api(c, 8)
        apply_fleet(c, api, fleet)
        apply_crds(c, ROOT / "crds")
        kinds = {"kubeforge": KubeforgeGroups, "lws": LwsGroups}
        for s in args.systems:
            make_namespace(c, api, f"lws-{s}")
            systems[s] = kinds[s](c, api, f"lws-{s}", fleet.name, args.replicas, args.size, args.gpus)
            systems[s].setup(capacity)
        threads = _watch(api, {s: x.ns for s, x in systems.items()}, tracker, stop, restarts)
        time.sleep(1.0)
        t = time.monotonic()
        for i, s in round_order(args.rounds, args.systems):
            _round(systems[s], tracker, i, args)
        say(f"rounds done in {time.monotonic() - t:.0f}s")
        stop.set()
        for th in threads:
            th.join(timeout=15)
    finally:
        stop.set()
        for x in systems.values():
            try:
                x.teardown()
            except Exception as e:  # noqa: BLE001 - the figures are taken; say it and go on
                say(f"{x.system}: teardown failed ({type(e).__name__}: {str(e)[:200]})")
        down(c, args.keep)
    f = figures(list(tracker.groups.values()), args.rounds, args.replicas, args.size, args.gpus,
                (load0, os.getloadavg()[0]), when)
    report(f, restarts)
    if args.json:
        dump(f, args.json)
        print(f"figures written to {args.json}")
    return 0
