"""How the Cache keys its books (kubeforge.runtime.cache_keys.service_key): a TrainingJob and an
InferenceService of the same name in one namespace (the "same name" scenario), through the real
runtime (tests/fakekube.py): neither reads the other's cache entries.

Before the cache keyed the books both kinds use apart (``service_key``),
the service's status write became the job's status in the operator's eyes: the next admission
round saw the running job as unplaced and admitted it a second time, booking another node's
GPUs for it.
"""

from __future__ import annotations

import asyncio

from fakekube import settle, small_cluster
from kubeforge.runtime.admission import admission_round
from kubeforge.runtime.inference import reconcile_service
from records import NS, job_body, service_body


def test_a_service_named_like_a_running_job_never_makes_admission_place_the_job_again():
    async def scenario():
        kube = await small_cluster(nodes=3)
        rt = kube.new_runtime()
        await kube.client_create("TrainingJob", job_body("x", replicas=1, gpus=8))
        await settle(kube)
        placed = kube.get("TrainingJob", NS, "x")["status"]["placement"]["nodes"]
        await kube.client_create("InferenceService", service_body("x", gpus=8, minReplicas=1, maxReplicas=1))
        await reconcile_service(rt, (NS, "x"))  # its status write
        seen = rt.cache.effective((NS, "x"), rt.cache.job((NS, "x")))
        plan = await admission_round(rt, kube.now)
        await settle(kube)
        job = kube.get("TrainingJob", NS, "x")
        return placed, seen.status.get("placement"), [a.key for a in plan.admit], job

    placed, seen, admitted, job = asyncio.run(scenario())
    assert seen is not None and seen["nodes"] == placed  # the job's own status, not the service's
    assert (NS, "x") not in admitted
    assert job["status"]["phase"] == "Running" and job["status"]["placement"]["nodes"] == placed
    assert job["status"]["attempt"] == 0
