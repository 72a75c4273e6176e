"""The local cluster as the benches use it: an API client, the fleet's nodes, namespaces, the
one GPUPool and checkpoint claim, the operator and the control plane's processes.

The cluster is :class:`kubeforge.sim.cluster.Cluster`; the operator is started and stopped with
:func:`kubeforge.demo.start_operator` / :func:`~kubeforge.demo.stop_operator` (imported here
only, so a bench never reaches into the demo itself). Every wait is bounded.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import yaml

from kubeforge.demo import start_operator, stop_operator
from kubeforge.sim.cluster import Cluster, home
from kubeforge.sim.fleet import GPUSpec, node_manifests

from e2e.bench.lib.procs import alive
from e2e.bench.lib.timing import Abort, say, wait_until

__all__ = [
    "BLOCK", "CLIQUE", "GPU", "GROUP", "JOB_LABEL", "POOL", "RANK_LABEL", "VERSION", "Cluster", "apply_crds",
    "apply_fleet", "apply_pool", "component_pid", "delete_namespace", "down", "fleet_capacity", "make_namespace",
    "open_api", "operator_log", "operator_metrics_port", "operator_pid", "shared_claim", "start_operator",
    "stop_operator", "wait_for_pool",
]

GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
GROUP, VERSION = "kubeforge.io", "v1alpha1"
POOL = "bench"
JOB_LABEL = "kubeforge.io/job-name"
RANK_LABEL = "kubeforge.io/replica-index"
_STARTUP_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def open_api(c: Cluster, pool_size: int):
    """A kubernetes-client ApiClient on the cluster's kubeconfig with ``pool_size`` connections."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=c.kubeconfig, client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(cfg)


def apply_crds(c: Cluster, crds: Path) -> None:
    """Apply the CRDs in ``crds`` (server-side) and wait (60 s at most) until they are Established."""
    c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    c.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")


def fleet_capacity(fleet) -> tuple[int, str]:
    """Total GPUs of a fleet and a short description of GPUs per node."""
    per = sorted({(g.gpu or GPUSpec()).count for g in fleet.resolved_groups()})
    total = sum(g.count * (g.gpu or GPUSpec()).count for g in fleet.resolved_groups())
    return total, "/".join(str(p) for p in per)


def apply_fleet(c: Cluster, api, fleet, ready_timeout: float = 300) -> list[dict]:
    """Create the fleet's Nodes: one server-side apply, then a status patch per node (client).

    Waits (at most ``ready_timeout`` s, or half a second per node if longer) for kwok to mark
    every node Ready with its GPUs and for kube-controller-manager to lift the not-ready taint
    that every new Node gets.
    """
    from kubernetes import client

    nodes = node_manifests(fleet)
    docs = "\n---\n".join(yaml.safe_dump(n) for n in nodes)
    c.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=kubeforge-sim", "-f", "-", input=docs,
              timeout=max(300, len(nodes) // 2))
    core = client.CoreV1Api(api)

    def patch(n: dict) -> None:
        body = {"status": {"capacity": n["status"]["capacity"], "allocatable": n["status"]["allocatable"]}}
        core.patch_node_status(n["metadata"]["name"], body, _preload_content=False, _request_timeout=60)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(patch, nodes))
    _wait_nodes_usable(core, {n["metadata"]["name"] for n in nodes}, ready_timeout)
    return nodes


def _wait_nodes_usable(core, names: set[str], ready_timeout: float) -> None:
    """kube-apiserver's TaintNodesByCondition admission plugin gives every new Node the taint
    node.kubernetes.io/not-ready:NoSchedule; kube-controller-manager's node lifecycle
    controller removes it after kwok reports the node Ready, a few nodes per second (at
    1,024 nodes on 2 CPUs, minutes after every node is Ready). Until then kube-scheduler
    (and kubeforge, whose pool status counts the node's GPUs as unavailable) place nothing
    there: a node is usable once Ready *and* free of that taint."""
    state = {"tainted": 0}

    def ready() -> bool:
        items = json.loads(core.list_node(_preload_content=False, _request_timeout=60).data)["items"]
        ok = tainted = 0
        for it in items:
            if it["metadata"]["name"] not in names:
                continue
            if any(t.get("key") in _STARTUP_TAINTS for t in it["spec"].get("taints") or []):
                tainted += 1
            elif it["status"].get("allocatable", {}).get(GPU) and any(
                    x["type"] == "Ready" and x["status"] == "True" for x in it["status"].get("conditions") or []):
                ok += 1
        state["tainted"] = tainted
        return ok == len(names)

    what = f"{len(names)} kwok nodes Ready with GPUs and without the not-ready taint"
    if not wait_until(ready, max(ready_timeout, len(names) / 2), what, 2.0):
        say(f"fleet: {state['tainted']} of {len(names)} nodes still carry the not-ready/unreachable taint "
            f"after {max(ready_timeout, len(names) / 2):.0f}s (kube-controller-manager removes it)")


def make_namespace(c: Cluster, api, ns: str) -> None:
    """Create ``ns`` and wait (bounded) for its default ServiceAccount."""
    from kubernetes import client

    c.kubectl("create", "namespace", ns)
    core = client.CoreV1Api(api)
    wait_until(lambda: core.read_namespaced_service_account("default", ns, _preload_content=False), 60,
               f"default ServiceAccount in {ns}", 0.3)


def delete_namespace(c: Cluster, ns: str, timeout: float) -> bool:
    """Delete ``ns`` and wait (bounded) until it is gone; returns whether it went."""
    c.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
    return wait_until(lambda: c.kubectl("get", "namespace", ns, check=False).returncode != 0, timeout,
                      f"namespace {ns} to go", 1.0)


def apply_pool(c: Cluster, fleet_name: str) -> None:
    """The one GPUPool :data:`POOL` over the fleet's nodes (label ``kubeforge.io/sim-fleet``)."""
    c.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUPool", "metadata": {"name": POOL},
        "spec": {"nodeSelector": {"matchLabels": {"kubeforge.io/sim-fleet": fleet_name}}},
    }))


def shared_claim(c: Cluster, core, ns: str, name: str) -> None:
    """Create the one checkpoint PVC every job of a run mounts (``checkpoint.existingClaimName``)
    and wait (at most 60 s) until it is Bound."""
    c.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": ns},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    wait_until(lambda: json.loads(core.read_namespaced_persistent_volume_claim(name, ns, _preload_content=False).data)
               ["status"].get("phase") == "Bound", 60, f"PVC {name} to bind")


def wait_for_pool(custom, pid: int, op_log: Path, capacity: int, timeout: float) -> bool:
    """Wait (at most ``timeout`` s) until the GPUPool's status shows ``capacity`` allocatable
    GPUs: the operator is up and sees the fleet.

    Raises:
        Abort: the operator exited.
    """
    def ready() -> bool:
        if not alive(pid):
            raise Abort(f"the operator exited during start-up; its log: {op_log}")
        st = custom.get_cluster_custom_object(GROUP, VERSION, "gpupools", POOL).get("status") or {}
        return int((st.get("gpus") or {}).get("allocatable") or 0) == capacity

    return wait_until(ready, timeout, f"GPUPool {POOL} status to show {capacity} GPUs")


def operator_log(c: Cluster) -> Path:
    """The operator's log, ``<cluster dir>/operator.log`` (appended to by every start)."""
    return c.dir / "operator.log"


def operator_pid(c: Cluster) -> int | None:
    """The operator's pid from ``<cluster dir>/operator.pid`` (written by ``start_operator``)."""
    try:
        return int((c.dir / "operator.pid").read_text())
    except (OSError, ValueError):
        return None


def operator_metrics_port(c: Cluster) -> int | None:
    """The operator's metrics port from ``<cluster dir>/operator.ports`` (JSON), or None."""
    try:
        return int(json.loads((c.dir / "operator.ports").read_text())["metrics"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def component_pid(c: Cluster, component: str) -> int | None:
    """Pid of a control-plane process of this cluster (``kube-apiserver``, ``etcd``, ``kwok-controller``).

    kwokctl's binary runtime keeps ``<KWOK_WORKDIR>/clusters/<name>/pids/<component>.pid``;
    failing that, /proc is scanned for the binary whose command line names this cluster.
    """
    workdir = home() / "kwok" / "clusters" / c.name
    for p in (workdir / "pids" / f"{component}.pid", workdir / f"{component}.pid"):
        try:
            pid = int(p.read_text().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            continue
    for d in Path("/proc").iterdir():  # bounded: one pass over the process table
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and Path(argv[0].decode(errors="replace")).name == component and \
                any(str(workdir).encode() in a for a in argv):
            return int(d.name)
    return None


def down(c: Cluster, keep: bool, log: Callable[[str], None] = say) -> None:
    """Take the cluster down unless ``keep``; a failure is a line saying how to do it by hand."""
    if keep:
        return
    try:
        c.down(log=log)
    except Exception as e:  # noqa: BLE001
        log(f"cluster down failed: {e}; run: .venv/bin/kubeforge sim down --name {c.name}")
