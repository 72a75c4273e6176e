"""The spec hashes (kubeforge.builders.training.spec_hash, kubeforge.builders.serving.serving_hash):
what an upgrade must leave alone (issue 31), the hashes that running work remembers.

A TrainingJob's ``status.placement.specHash`` and a serving group's ``templateHash`` are compared
with the hash of the spec as the operator reads it now (:func:`kubeforge.builders.training.spec_hash`,
:func:`kubeforge.builders.serving.serving_hash`): another hash restarts the gang or rolls the group.
Both hash the spec's model dump, defaults included, so a field added to ``template``, ``topology``,
``pools``, ``parallelism``, ``multiNode``... with a default of its own would change the hash of every
object stored before it and restart every job and group at the upgrade. The values below are the
ones v0.1.0 computed for these specs (v0.1.0's examples, and the shapes of
tests/test_upgrade_cluster.py): a new field must keep them (leave it out of the hashed fields, or
out of the dump while it has its default). tests/test_upgrade_cluster.py checks the same on a
cluster, from v0.1.0's operator to this one.
"""

from __future__ import annotations

import pytest
import yaml

from kubeforge.api import InferenceServiceSpec, TrainingJobSpec
from kubeforge.builders.serving import serving_hash
from kubeforge.builders.training import spec_hash
from kubeforge.objects import record_from_k8s

V0_1_0 = {
    "TrainingJob/llama-pretrain": "f117ebace7a72b31",
    "TrainingJob/finetune": "3412d6724c7f7586",
    "TrainingJob/minimal": "df69a5404b14f5a7",
    "InferenceService/llama-405b": "1f00e59a3e7c4fd8",
    "InferenceService/llama-chat": "d48babad3e87946f",
    "InferenceService/minimal": "f3c54f525b0ed2de",
}
"""{kind/name: the hash v0.1.0 computed} (builders.training.spec_hash, builders.serving.serving_hash)."""

SPECS = yaml.safe_load_all("""\
kind: TrainingJob
name: llama-pretrain
spec:
  pools: [h100]
  replicas: 4
  gpusPerReplica: 8
  topology: {mode: Required, level: nvlink}
  checkpoint: {size: 100Gi, accessModes: [ReadWriteMany], mountPath: /checkpoints}
  failurePolicy: {maxRestarts: 3}
  template:
    spec:
      terminationGracePeriodSeconds: 120
      containers:
        - name: trainer
          image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
          command: [torchrun, /workload/train_ddp.py, --steps, "100000", --checkpoint-every, "500"]
---
kind: TrainingJob
name: finetune
spec:
  pools: [h100]
  replicas: 2
  gpusPerReplica: 8
  topology: {mode: Preferred, level: nvlink}
  template:
    spec:
      containers:
        - name: trainer
          image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
          command: [torchrun, /workload/train_ddp.py, --steps, "2000"]
---
kind: TrainingJob
name: minimal
spec:
  pools: [train]
  replicas: 1
  gpusPerReplica: 2
  template:
    spec:
      containers: [{name: trainer, image: example.com/train:1}]
---
kind: InferenceService
name: llama-405b
spec:
  pools: [h100]
  parallelism: {tensor: 8, pipeline: 2}
  engine: vllm
  multiNode: {startupPolicy: LeaderCreated, maxGroupRestarts: 5}
  topology: {mode: Required, level: nvlink}
  port: 8000
  minReplicas: 2
  maxReplicas: 4
  drainSeconds: 120
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.6.4
          command: [vllm, serve, meta-llama/Llama-3.1-405B-Instruct, --port, "8000"]
          readinessProbe:
            httpGet: {path: /health, port: 8000}
---
kind: InferenceService
name: llama-chat
spec:
  pools: [h100]
  gpusPerReplica: 1
  port: 8000
  minReplicas: 0
  maxReplicas: 8
  drainSeconds: 30
  activation: {holdSeconds: 60, queueLimit: 100}
  autoscaling:
    pollingIntervalSeconds: 1
    targetPerReplica: 4
    scaleToZeroAfterSeconds: 15
    scaleUp: {stabilizationWindowSeconds: 0, maxStep: 4, periodSeconds: 1}
    scaleDown: {stabilizationWindowSeconds: 10, maxStep: 4, periodSeconds: 1}
  template:
    spec:
      terminationGracePeriodSeconds: 5
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.6.4
          args: [--model, meta-llama/Llama-3.1-8B-Instruct, --port, "8000"]
          readinessProbe:
            httpGet: {path: /health, port: 8000}
---
kind: InferenceService
name: minimal
spec:
  pools: [serve]
  gpusPerReplica: 1
  template:
    spec:
      containers: [{name: vllm, image: vllm/vllm-openai:v0.6.4}]
""")
SPECS = {f"{d['kind']}/{d['name']}": d for d in SPECS}


@pytest.mark.parametrize("key", sorted(V0_1_0))
def test_a_spec_stored_by_v0_1_0_hashes_as_v0_1_0_hashed_it(key: str) -> None:
    d = SPECS[key]
    body = {"metadata": {"name": d["name"], "namespace": "default"}, "spec": d["spec"]}
    if d["kind"] == "TrainingJob":
        rec = record_from_k8s(TrainingJobSpec, body)
        assert rec.spec is not None, rec
        assert spec_hash(rec) == V0_1_0[key]
    else:
        rec = record_from_k8s(InferenceServiceSpec, body)
        assert rec.spec is not None, rec
        assert serving_hash(rec) == V0_1_0[key]
