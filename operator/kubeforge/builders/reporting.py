"""What a worker pod needs to report its progress to the operator (docs/workload-reporting.md).

Every worker gets, when the operator serves the status endpoint (``kubeforge run
--status-url``; switched off by ``--no-worker-reporting``):

- one projected volume ``kubeforge-status`` at ``/var/run/secrets/kubeforge.io/status``
  (read-only, in every container): ``token``, a ServiceAccount token bound to the pod with the
  audience :data:`kubeforge.api.STATUS_TOKEN_AUDIENCE` and a one-hour life (the kubelet
  renews the file), and ``ca.crt``, the CA of the endpoint's certificate, from the namespace's
  ConfigMap ``kubeforge-status-ca`` (which the operator writes before the pods; ``optional``
  so a pod never waits on it);
- the environment: ``KUBEFORGE_STATUS_URL`` (kubeforge's path), ``KUBEFORGE_STATUS_TOKEN``
  and ``KUBEFORGE_STATUS_CA_CERT`` (the files' paths), and the same for Kubeflow Trainer's
  names (``KUBEFLOW_TRAINER_STATUS_URL`` pointing at the Kubeflow-compatible path of the same
  server, ``_TOKEN``, ``_CA_CERT``), so Hugging Face's ``KubeflowTrainerCallback`` and Kubeflow
  SDK scripts report unchanged. A variable the template already sets is left as it is.

Pure: the pod spec and the config in, the pod spec changed in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kubeforge.api import STATUS_TOKEN_AUDIENCE
from kubeforge.objects import MANAGED_BY, MANAGER, TrainingJobRecord
from kubeforge.progress import status_path

STATUS_VOLUME = "kubeforge-status"
"""The projected volume's name (token and CA)."""
STATUS_MOUNT_PATH = "/var/run/secrets/kubeforge.io/status"
"""Where it is mounted in every container (Kubeflow Trainer mounts its own at
``/var/run/secrets/kubeflow/trainer``)."""
TOKEN_FILE = "token"
CA_FILE = "ca.crt"
STATUS_CA_CONFIGMAP = "kubeforge-status-ca"
"""The ConfigMap, one per namespace with TrainingJobs, that holds the endpoint's CA (key ``ca.crt``)."""
TOKEN_SECONDS = 3600
"""The projected token's ``expirationSeconds`` (the kubelet rewrites the file at 80 % of it)."""


@dataclass(frozen=True)
class ReportingConfig:
    """Where workers report and how they authenticate.

    Attributes:
        url: The endpoint's base URL, ``https://HOST:PORT`` (the chart's Service, or a loopback
            address for the local cluster); the paths are appended.
        audience: The projected token's audience.
        token_seconds: Its ``expirationSeconds`` (at least 600, the API server's floor).
        ca_config_map: The namespace's ConfigMap with the CA.
    """

    url: str
    audience: str = STATUS_TOKEN_AUDIENCE
    token_seconds: int = TOKEN_SECONDS
    ca_config_map: str = STATUS_CA_CONFIGMAP


def reporting_env(job: TrainingJobRecord, cfg: ReportingConfig) -> dict[str, str]:
    """The six variables a worker of ``job`` gets (see the module docstring)."""
    base = cfg.url.rstrip("/")
    token, ca = f"{STATUS_MOUNT_PATH}/{TOKEN_FILE}", f"{STATUS_MOUNT_PATH}/{CA_FILE}"
    return {
        "KUBEFORGE_STATUS_URL": base + status_path(job.namespace, job.name),
        "KUBEFORGE_STATUS_TOKEN": token,
        "KUBEFORGE_STATUS_CA_CERT": ca,
        "KUBEFLOW_TRAINER_STATUS_URL": base + status_path(job.namespace, job.name, kubeflow=True),
        "KUBEFLOW_TRAINER_STATUS_TOKEN": token,
        "KUBEFLOW_TRAINER_STATUS_CA_CERT": ca,
    }


def reporting_volume(cfg: ReportingConfig) -> dict[str, Any]:
    """The projected volume: the pod-bound token and the CA."""
    return {"name": STATUS_VOLUME, "projected": {"sources": [
        {"serviceAccountToken": {"audience": cfg.audience, "expirationSeconds": cfg.token_seconds, "path": TOKEN_FILE}},
        {"configMap": {"name": cfg.ca_config_map, "items": [{"key": CA_FILE, "path": CA_FILE}], "optional": True}},
    ]}}


def add_reporting(pod_spec: dict[str, Any], job: TrainingJobRecord, cfg: ReportingConfig | None) -> None:
    """Give every container of ``pod_spec`` the volume and the environment (nothing when
    ``cfg`` is None: reporting is off). Variables the template sets itself are kept."""
    if cfg is None:
        return
    env = reporting_env(job, cfg)
    for c in pod_spec.get("containers") or []:
        have = {e.get("name") for e in c.get("env") or []}
        c["env"] = list(c.get("env") or []) + [{"name": k, "value": v} for k, v in env.items() if k not in have]
        mounts = [m for m in c.get("volumeMounts") or [] if m.get("name") != STATUS_VOLUME]
        c["volumeMounts"] = mounts + [{"name": STATUS_VOLUME, "mountPath": STATUS_MOUNT_PATH, "readOnly": True}]
    volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") != STATUS_VOLUME]
    pod_spec["volumes"] = volumes + [reporting_volume(cfg)]


def build_ca_config_map(namespace: str, ca_pem: str, name: str = STATUS_CA_CONFIGMAP) -> dict[str, Any]:
    """The namespace's ConfigMap with the endpoint's CA (no owner: it serves every job there,
    like the workers Service; labelled ``app.kubernetes.io/managed-by: kubeforge``)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": {MANAGED_BY: MANAGER}},
            "data": {CA_FILE: ca_pem}}


def ca_of(config_map: Mapping[str, Any] | None) -> str | None:
    """The CA a ConfigMap of :func:`build_ca_config_map` holds, or None."""
    return ((config_map or {}).get("data") or {}).get(CA_FILE)
