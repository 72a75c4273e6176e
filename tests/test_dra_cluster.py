"""DRA pools and NVL72 cliques on the real control plane (issue 15): kube-scheduler 1.34 allocates
the claims itself from the sim's ResourceSlices, kube-controller-manager makes each pod's claims
from its templates, the sim plays NVIDIA's ComputeDomain controller and IMEX daemons."""

from __future__ import annotations

import json

import pytest

from conftest import DRA_GPUS as GPUS, apply, condition, get_json, job_pods, job_status, training_job, wait_for

pytestmark = pytest.mark.cluster


def pool_gpus(cluster, name: str) -> dict:
    return (get_json(cluster, "gpupool", name).get("status") or {}).get("gpus") or {}


def claims(cluster, namespace: str) -> list[dict]:
    return get_json(cluster, "resourceclaims", "-n", namespace)["items"]


def domains(cluster, namespace: str) -> list[dict]:
    return get_json(cluster, "computedomains", "-n", namespace)["items"]


def test_dra_pool_capacity_claims_and_no_overcommit(cluster, namespace, dra_fleet):
    """Capacity from the slices; a job's pods get claims that kube-scheduler allocates on the nodes
    kubeforge chose; a foreign claim-holding pod and a device-plugin job are counted, never
    over-committed."""
    pool = dra_fleet["pool"]
    wait_for(lambda: pool_gpus(cluster, pool).get("allocatable") == 18 * GPUS, timeout=60, what="DRA pool capacity")

    def columns():  # NODES GPUS FREE of each pool: the same columns for a DRA and a device-plugin pool
        out = cluster.kubectl("get", "gpupools", pool, f"{pool}-dp", "--no-headers").stdout.split("\n")
        return [line.split()[1:4] for line in out if line.strip()]

    # The device-plugin pool's status is written by its own reconcile: wait for it too.
    wait_for(lambda: columns() == [["18", "72", "72"], ["2", "8", "8"]], timeout=60, what="both pools' columns")
    # A pod that is not kubeforge's holds 3 GPUs of rack-0 through its own claim.
    apply(cluster, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": "foreign", "namespace": namespace},
                    "spec": {"devices": {"requests": [{"name": "g", "exactly": {
                        "deviceClassName": "gpu.sim.kubeforge.io", "allocationMode": "ExactCount", "count": 3}}]}}})
    rack0 = dra_fleet["rack"][0]
    apply(cluster, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "foreign", "namespace": namespace},
                    "spec": {"nodeSelector": {"kubernetes.io/hostname": rack0},
                             "resourceClaims": [{"name": "g", "resourceClaimName": "foreign"}],
                             "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "g"}]}}]}})
    wait_for(lambda: pool_gpus(cluster, pool).get("allocated") == 3, timeout=60, what="the foreign claim counted")
    # Jobs asking for every GPU left: single-node ranks of 2 and 4 GPUs, and one on the device-plugin pool.
    apply(cluster, training_job("small", namespace, replicas=17, gpus=4, mode="None", level=None, pools=[pool]))
    apply(cluster, training_job("tight", namespace, replicas=1, gpus=2, mode="None", level=None, pools=[pool]))
    apply(cluster, training_job("dp", namespace, replicas=2, gpus=4, mode="None", level=None, pools=[f"{pool}-dp"]))
    for job in ("small", "dp"):
        wait_for(lambda: job_status(cluster, namespace, job).get("phase") == "Running", timeout=120, what=f"{job} Running")
    st = job_status(cluster, namespace, "tight")
    assert st.get("phase") != "Running" and condition(st, "Admitted")["status"] == "False", st  # 1 GPU left on rack-0
    pods = job_pods(cluster, namespace, "small")
    by_pod = {}
    for c in claims(cluster, namespace):
        owner = next((o["name"] for o in c["metadata"].get("ownerReferences") or [] if o["kind"] == "Pod"), None)
        by_pod[owner] = c
    for p in pods:
        spec = p["spec"]
        assert [c["name"] for c in spec["resourceClaims"]] == ["gpus"], spec["resourceClaims"]
        main = spec["containers"][0]
        assert "nvidia.com/gpu" not in json.dumps(main.get("resources")), main
        alloc = by_pod[p["metadata"]["name"]]["status"]["allocation"]
        results = alloc["devices"]["results"]
        assert len(results) == 4 and {r["pool"] for r in results} == {p["spec"]["nodeName"]}, results
        assert p["spec"]["nodeName"] == p["metadata"]["annotations"]["kubeforge.io/assigned-node"]
    dp = job_pods(cluster, namespace, "dp")
    assert all(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4" for p in dp)
    assert pool_gpus(cluster, pool).get("free") == 1 and pool_gpus(cluster, f"{pool}-dp").get("free") == 0
    # Every node holds at most its 4 devices: count allocated devices per node from the claims.
    held: dict[str, int] = {}
    for c in claims(cluster, namespace):
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []):
            held[r["pool"]] = held.get(r["pool"], 0) + 1
    assert held and max(held.values()) <= GPUS, held
    cluster.kubectl("delete", "trainingjob", "small", "tight", "dp", "-n", namespace, "--wait=false")


def domain_nodes_ready(cluster, namespace: str, job: str) -> bool:
    return (condition(job_status(cluster, namespace, job), "ComputeDomainReady") or {}).get("status") == "True"


def wait_domain_ready(cluster, namespace: str, job: str, what: str) -> None:
    """Wait for ComputeDomainReady=True; on timeout say what the job and its domains show."""
    try:
        wait_for(lambda: domain_nodes_ready(cluster, namespace, job), timeout=90, what=what)
    except AssertionError as e:
        cond = condition(job_status(cluster, namespace, job), "ComputeDomainReady")
        cds = [(d["metadata"]["name"], d["metadata"].get("finalizers"), (d.get("status") or {}).get("status"),
                len((d.get("status") or {}).get("nodes") or [])) for d in domains(cluster, namespace)]
        channel = [c["metadata"]["name"] for c in claims(cluster, namespace)
                   if "resource.nvidia.com/computeDomain" in (c["metadata"].get("labels") or {})]
        log = (cluster.dir / "imex.log").read_text(errors="replace").splitlines()[-10:]
        raise AssertionError(f"{e}\ncondition: {cond}\ndomains: {cds}\nchannel claims: {len(channel)}\n"
                             "imex.log:\n" + "\n".join(log)) from None


def restart_gang(cluster, namespace: str, job: str, preemptions: int) -> None:
    """Delete one worker as someone else would (a preemption) and wait for the gang to run again."""
    victim = job_pods(cluster, namespace, job)[0]["metadata"]["name"]
    cluster.kubectl("delete", "pod", victim, "-n", namespace, "--wait=false")
    wait_for(lambda: (job_status(cluster, namespace, job).get("restarts") or {}).get("preemptions") == preemptions,
             timeout=60, what=f"the gang restarted ({preemptions})")
    wait_for(lambda: job_status(cluster, namespace, job).get("phase") == "Running", timeout=180, what="gang Running again")


def cordon(cluster, nodes, undo=False) -> None:
    cluster.kubectl("uncordon" if undo else "cordon", *nodes)


@pytest.mark.parametrize("dra_fleet", [2], indirect=True)
def test_nvl72_gang_compute_domain_lifecycle(cluster, namespace, dra_fleet):
    """A 16-node gang on NVL72 racks: whole nodes of one clique with 2 spares, one ComputeDomain
    owned by the job (numNodes 0), its pods reference its channel template, ComputeDomainReady
    flips; a restart in the same clique keeps the domain; a restart that moves the gang to the
    other rack replaces it (the old one goes with its template); a delete leaves no domain, no
    claim and no template."""
    pool = dra_fleet["pool"]
    (c0, rack0), (c1, rack1) = sorted(dra_fleet["cliques"].items())
    wait_for(lambda: pool_gpus(cluster, pool).get("allocatable") == 36 * GPUS, timeout=60, what="DRA pool capacity")
    cordon(cluster, rack1)  # the gang starts, and restarts in place, on rack 0
    apply(cluster, training_job("gang", namespace, replicas=16, gpus=4, mode="Required", level="nvlink", pools=[pool]))
    wait_for(lambda: job_status(cluster, namespace, "gang").get("phase") == "Running", timeout=180, what="gang Running")
    st = job_status(cluster, namespace, "gang")
    assert len(set(st["placement"]["nodes"])) == 16 and set(st["placement"]["nodes"]) <= set(rack0), st["placement"]
    assert "2 wholly free nodes left" in st["placement"]["reason"], st["placement"]["reason"]
    cds = domains(cluster, namespace)
    assert len(cds) == 1, cds
    cd = cds[0]
    assert cd["spec"]["numNodes"] == 0 and "kubeforge.io/compute-domain" in cd["metadata"]["finalizers"]
    assert cd["metadata"]["ownerReferences"][0]["name"] == "gang"
    channel = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
    for p in job_pods(cluster, namespace, "gang"):
        refs = {c["name"]: c["resourceClaimTemplateName"] for c in p["spec"]["resourceClaims"]}
        assert refs["compute-domain"] == channel, refs
    wait_domain_ready(cluster, namespace, "gang", "ComputeDomainReady=True")
    # Restart in place: the gang comes back in the same clique and keeps its domain.
    restart_gang(cluster, namespace, "gang", 1)
    assert set(job_status(cluster, namespace, "gang")["placement"]["nodes"]) <= set(rack0)
    after = domains(cluster, namespace)
    assert [d["metadata"]["uid"] for d in after] == [cd["metadata"]["uid"]], after
    wait_domain_ready(cluster, namespace, "gang", "ComputeDomainReady=True again")
    # A move: rack 0 keeps only 15 schedulable nodes, rack 1 opens; the restart lands there with a
    # new domain, and the old one goes (with its channel template) once the old pods are gone.
    cordon(cluster, rack1, undo=True)
    cordon(cluster, rack0[:3])
    restart_gang(cluster, namespace, "gang", 2)
    assert set(job_status(cluster, namespace, "gang")["placement"]["nodes"]) <= set(rack1)
    wait_for(lambda: [d["metadata"]["annotations"]["kubeforge.io/cliques"] for d in domains(cluster, namespace)] == [c1],
             timeout=120, what="the domain replaced by one of the new clique")
    moved = domains(cluster, namespace)[0]
    assert moved["metadata"]["uid"] != cd["metadata"]["uid"]
    wait_domain_ready(cluster, namespace, "gang", "ComputeDomainReady=True after the move")
    templates = {t["metadata"]["name"] for t in get_json(cluster, "resourceclaimtemplates", "-n", namespace)["items"]}
    assert channel not in templates and moved["spec"]["channel"]["resourceClaimTemplate"]["name"] in templates, templates
    cordon(cluster, rack0[:3], undo=True)
    # Delete: no domain, no claim, no template left.
    cluster.kubectl("delete", "trainingjob", "gang", "-n", namespace, "--wait=false")
    wait_for(lambda: not domains(cluster, namespace), timeout=120, what="the ComputeDomain gone")
    wait_for(lambda: not claims(cluster, namespace), timeout=120, what="the claims gone")
    wait_for(lambda: not get_json(cluster, "resourceclaimtemplates", "-n", namespace)["items"], timeout=60,
             what="the claim templates gone")


def test_a_dra_pool_whose_device_class_is_missing_admits_nothing_until_it_exists(cluster, namespace, dra_fleet):
    """Issue 32.3, the user's steps: a DRA pool names a DeviceClass that does not exist. It used
    to say Ready=True, admit a gang and hold its GPUs until the pods failed (PlacementLost), once
    per attempt. Now the pool says DeviceClassNotFound, the job waits with that reason and holds
    nothing, and once the class is created the job is admitted and runs."""
    from kubeforge.sim import dra

    pool, missing = dra_fleet["pool"], f"gpu.{namespace}.kubeforge.io"
    cluster.kubectl("patch", "gpupool", pool, "--type", "merge", "-p",
                    json.dumps({"spec": {"dra": {"deviceClassName": missing}}}))

    def ready():
        return condition(get_json(cluster, "gpupool", pool).get("status") or {}, "Ready") or {}

    wait_for(lambda: ready().get("reason") == "DeviceClassNotFound", timeout=60, what="pool DeviceClassNotFound")
    assert ready()["status"] == "False" and missing in ready()["message"]
    apply(cluster, training_job("j", namespace, replicas=1, gpus=4, mode="None", level=None, pools=[pool]))
    wait_for(lambda: (condition(job_status(cluster, namespace, "j"), "Admitted") or {}).get("reason")
             == "DeviceClassNotFound", timeout=60, what="the job waits for the class")
    assert job_pods(cluster, namespace, "j") == [] and pool_gpus(cluster, pool).get("allocated", 0) == 0
    events = cluster.kubectl("get", "events", "-A", "--field-selector", f"involvedObject.name={pool}",
                             "-o", "json").stdout
    assert "DeviceClassNotFound" in events  # the pool's Warning Event
    cls = dra.device_classes()[0]
    cls["metadata"]["name"] = missing
    apply(cluster, cls)
    try:
        wait_for(lambda: job_status(cluster, namespace, "j").get("phase") == "Running", timeout=120,
                 what="the job runs once the class exists")
        assert ready()["status"] == "True"
    finally:
        cluster.kubectl("delete", "deviceclass", missing, "--ignore-not-found", "--wait=false", check=False)
