"""A stand-in for NVIDIA's ComputeDomain controller and its IMEX daemons, for the sim (run by
:func:`kubeforge.sim.dra.install`, ``python -m kubeforge.sim.imex``).

For every ComputeDomain, once a second:

- adds the driver's finalizer (``resource.nvidia.com/computeDomain``) and creates the channel
  ResourceClaimTemplate ``spec.channel.resourceClaimTemplate.name`` (one channel of the sim's channel
  class; its claims carry the label ``resource.nvidia.com/computeDomain: <uid>``);
- plays the IMEX daemons: a node where a channel claim of the domain is allocated gets a Ready
  entry in ``status.nodes`` ``--ready-delay`` seconds after the claim was first seen there (the
  daemon starting); ``status.status`` is Ready once every such node is;
- on deletion: deletes the channel template and removes its finalizer (after any other finalizer
  the domain carries, such as kubeforge's, is gone: the real controller cleans up then too).
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kubeforge.accelerators.nvidia import (
    CLIQUE_LABEL, COMPUTE_DOMAIN_API_VERSION, COMPUTE_DOMAIN_GROUP, COMPUTE_DOMAIN_KIND, COMPUTE_DOMAIN_PLURAL,
    COMPUTE_DOMAIN_VERSION,
)

log = logging.getLogger("kubeforge.sim.imex")
FINALIZER = "resource.nvidia.com/computeDomain"
DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
CD_GROUP, CD_VERSION, CD_PLURAL = COMPUTE_DOMAIN_GROUP, COMPUTE_DOMAIN_VERSION, COMPUTE_DOMAIN_PLURAL
CD = (CD_GROUP, CD_VERSION, CD_PLURAL)
"""For ``list_cluster_custom_object``; namespaced calls take (group, version, namespace, plural, name)."""
RES = ("resource.k8s.io", "v1")


def _call(what: str, expected: tuple[int, ...], fn, *a, **kw):
    """``fn(*a, **kw)``; an ApiException whose status is in ``expected`` (a 404 of an object gone
    meanwhile, a 409 of a stale write decided again next step) returns None. Anything else is
    logged with the API server's message (a 422 means the sim writes what the schema refuses: it
    must be seen, never swallowed) and returns None, so one object never stops the others."""
    try:
        return fn(*a, **kw)
    except ApiException as e:
        # A 404 whose body is no Status is a path the API server does not serve (a bug here,
        # not an object gone meanwhile): logged like any refusal.
        gone = e.status == 404 and '"kind":"Status"' in (e.body or "").replace(" ", "")
        if e.status not in expected or (e.status == 404 and not gone):
            log.warning("%s: %s %s: %s", what, e.status, e.reason, (e.body or "")[:500])
        return None


def _domain_nodes(claims: list, uid: str) -> set[str]:
    """Nodes where a channel claim of the domain ``uid`` is allocated (its devices' pool is the
    node's name, as the sim's slices publish them)."""
    nodes: set[str] = set()
    for c in claims:
        if (c["metadata"].get("labels") or {}).get(DOMAIN_LABEL) != uid:
            continue
        for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
            if r.get("pool"):
                nodes.add(r["pool"])
    return nodes


def step(api: client.CustomObjectsApi, core: client.CoreV1Api, seen: dict, delay: float, now: float) -> None:
    """One pass over every ComputeDomain (see the module docstring)."""
    domains = api.list_cluster_custom_object(*CD).get("items") or []
    if not domains:
        seen.clear()
        return
    claims = api.list_cluster_custom_object(*RES, "resourceclaims", label_selector=DOMAIN_LABEL).get("items") or []
    cliques = {n.metadata.name: (n.metadata.labels or {}).get(CLIQUE_LABEL, "")
               for n in core.list_node(label_selector="kubeforge.io/sim-dra").items}
    for cd in domains:
        _one(api, cd, claims, cliques, seen, delay, now)
    live = {cd["metadata"]["uid"] for cd in domains}
    for k in [k for k in seen if k[0] not in live]:
        del seen[k]


def _one(api: client.CustomObjectsApi, cd: dict, claims: list, cliques: dict, seen: dict, delay: float, now: float) -> None:
    md, spec = cd["metadata"], cd.get("spec") or {}
    ns, name, uid = md["namespace"], md["name"], md["uid"]
    what = f"ComputeDomain {ns}/{name}"
    template = ((spec.get("channel") or {}).get("resourceClaimTemplate") or {}).get("name")
    finalizers = list(md.get("finalizers") or [])
    # Merge patches with the resourceVersion read: a 409 if the object changed meanwhile (the
    # next step decides again), and no JSON patch, whose content type older clients guess wrong.
    rv = md.get("resourceVersion")
    if md.get("deletionTimestamp"):
        if template:
            _call(f"{what}: deleting its channel template", (404,),
                  api.delete_namespaced_custom_object, *RES, ns, "resourceclaimtemplates", template)
        if finalizers == [FINALIZER]:
            _call(f"{what}: removing the driver's finalizer", (404, 409), api.patch_namespaced_custom_object,
                  CD_GROUP, CD_VERSION, ns, CD_PLURAL, name, {"metadata": {"finalizers": [], "resourceVersion": rv}})
        return
    if FINALIZER not in finalizers:
        _call(f"{what}: adding the driver's finalizer", (404, 409), api.patch_namespaced_custom_object,
              CD_GROUP, CD_VERSION, ns, CD_PLURAL, name,
              {"metadata": {"finalizers": finalizers + [FINALIZER], "resourceVersion": rv}})
    if template:
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": template, "namespace": ns,
                             "ownerReferences": [{"apiVersion": COMPUTE_DOMAIN_API_VERSION, "kind": COMPUTE_DOMAIN_KIND,
                                                  "name": name, "uid": uid}]},
                "spec": {"metadata": {"labels": {DOMAIN_LABEL: uid}},
                         "spec": {"devices": {"requests": [{"name": "channel", "exactly": {
                             "deviceClassName": CHANNEL_CLASS, "allocationMode": "ExactCount", "count": 1}}]}}}}
        # 409: made already; 403: the namespace is terminating (nothing new may be created there).
        _call(f"{what}: creating its channel template", (403, 409),
              api.create_namespaced_custom_object, *RES, ns, "resourceclaimtemplates", body)
    entries = []
    for i, node in enumerate(sorted(_domain_nodes(claims, uid))):
        first = seen.setdefault((uid, node), now)
        entries.append({"name": node, "ipAddress": f"10.254.{i // 250}.{i % 250 + 1}", "cliqueID": cliques.get(node, ""),
                        "index": i, "status": "Ready" if now - first >= delay else "NotReady"})
    status = {"status": "Ready" if entries and all(e["status"] == "Ready" for e in entries) else "NotReady",
              "nodes": entries}
    if (cd.get("status") or {}) != status:
        ready = sum(e["status"] == "Ready" for e in entries)
        log.info("%s: %s, %d of %d nodes' IMEX daemons Ready", what, status["status"], ready, len(entries))
        _call(f"{what}: writing status", (404, 409), api.patch_namespaced_custom_object_status, CD_GROUP,
              CD_VERSION, ns, CD_PLURAL, name,
              {"metadata": {"resourceVersion": rv}, "status": status})


CHANNEL_CLASS = "compute-domain-default-channel.sim.kubeforge.io"


def main() -> None:  # pragma: no cover (a process of the sim)
    global CHANNEL_CLASS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--channel-class", default=CHANNEL_CLASS)
    ap.add_argument("--ready-delay", type=float, default=3.0, help="seconds from a channel claim's allocation on a node to its IMEX daemon being Ready")
    ap.add_argument("--interval", type=float, default=1.0)
    a = ap.parse_args()
    CHANNEL_CLASS = a.channel_class
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    config.load_kube_config(a.kubeconfig)
    api, core = client.CustomObjectsApi(), client.CoreV1Api()
    seen: dict[Any, float] = {}
    log.info("sim IMEX daemons: ready %.1fs after a channel claim is allocated", a.ready_delay)
    while True:
        try:
            step(api, core, seen, a.ready_delay, time.time())
        except Exception:  # keep going: the sim must not die on one odd object
            log.exception("step failed")
        time.sleep(a.interval)


if __name__ == "__main__":  # pragma: no cover
    main()
