"""What a worker pod gets to report its progress (kubeforge.builders.reporting via build_worker_pod)."""

from __future__ import annotations

import pytest

from kubeforge.api import STATUS_TOKEN_AUDIENCE
from kubeforge.builders.reporting import (
    STATUS_CA_CONFIGMAP, STATUS_MOUNT_PATH, STATUS_VOLUME, ReportingConfig, build_ca_config_map, ca_of,
)
from kubeforge.builders.training import build_worker_pod
from kubeforge.objects import PlacementRecord
from records import mk_job

PLACEMENT = PlacementRecord(pool="p", nodes=("n0", "n1"))
CFG = ReportingConfig(url="https://kubeforge-status.kubeforge-system.svc:8443")
ENV_NAMES = ("KUBEFORGE_STATUS_URL", "KUBEFORGE_STATUS_TOKEN", "KUBEFORGE_STATUS_CA_CERT",
             "KUBEFLOW_TRAINER_STATUS_URL", "KUBEFLOW_TRAINER_STATUS_TOKEN", "KUBEFLOW_TRAINER_STATUS_CA_CERT")


def pod(reporting=CFG, containers=None):
    job = mk_job("llm", replicas=2, template={"spec": {"containers": containers}} if containers else None)
    return build_worker_pod(job, rank=1, attempt=0, placement=PLACEMENT, reporting=reporting)


def env_of(container) -> dict:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def test_every_container_gets_the_env_and_the_read_only_mount():
    p = pod(containers=[{"name": "trainer", "image": "x"}, {"name": "sidecar", "image": "y"}])
    for c in p["spec"]["containers"]:
        env = env_of(c)
        assert env["KUBEFORGE_STATUS_URL"] == (
            "https://kubeforge-status.kubeforge-system.svc:8443/apis/kubeforge.io/v1alpha1/namespaces/team-a/trainingjobs/llm/status")
        assert env["KUBEFLOW_TRAINER_STATUS_URL"] == (
            "https://kubeforge-status.kubeforge-system.svc:8443/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llm/status")
        for name in ("KUBEFORGE_STATUS_TOKEN", "KUBEFLOW_TRAINER_STATUS_TOKEN"):
            assert env[name] == f"{STATUS_MOUNT_PATH}/token"
        for name in ("KUBEFORGE_STATUS_CA_CERT", "KUBEFLOW_TRAINER_STATUS_CA_CERT"):
            assert env[name] == f"{STATUS_MOUNT_PATH}/ca.crt"
        assert {"name": STATUS_VOLUME, "mountPath": STATUS_MOUNT_PATH, "readOnly": True} in c["volumeMounts"]


def test_the_projected_volume_binds_a_token_of_the_kubeforge_audience_and_the_ca():
    vol = next(v for v in pod()["spec"]["volumes"] if v["name"] == STATUS_VOLUME)
    token, ca = vol["projected"]["sources"]
    assert token == {"serviceAccountToken": {"audience": STATUS_TOKEN_AUDIENCE, "expirationSeconds": 3600,
                                             "path": "token"}}
    assert ca["configMap"]["name"] == STATUS_CA_CONFIGMAP and ca["configMap"]["optional"] is True
    assert STATUS_TOKEN_AUDIENCE == "kubeforge.io"


def test_reporting_off_adds_nothing():
    p = pod(reporting=None)
    assert all(v["name"] != STATUS_VOLUME for v in p["spec"]["volumes"])
    assert not set(ENV_NAMES) & set(env_of(p["spec"]["containers"][0]))


def test_a_variable_the_template_sets_is_kept():
    mine = {"name": "KUBEFLOW_TRAINER_STATUS_URL", "value": "https://my-kubeflow:8082/x"}
    p = pod(containers=[{"name": "trainer", "image": "x", "env": [mine]}])
    env = env_of(p["spec"]["containers"][0])
    assert env["KUBEFLOW_TRAINER_STATUS_URL"] == "https://my-kubeflow:8082/x"
    assert [e["name"] for e in p["spec"]["containers"][0]["env"]].count("KUBEFLOW_TRAINER_STATUS_URL") == 1
    assert env["KUBEFORGE_STATUS_URL"].startswith("https://kubeforge-status")


@pytest.mark.parametrize("url", ["https://127.0.0.1:18443", "https://127.0.0.1:18443/"])
def test_base_url_with_or_without_slash(url):
    env = env_of(pod(reporting=ReportingConfig(url=url))["spec"]["containers"][0])
    assert env["KUBEFORGE_STATUS_URL"].startswith("https://127.0.0.1:18443/apis/")


def test_ca_config_map_round_trip():
    cm = build_ca_config_map("team-a", "-----BEGIN CERTIFICATE-----\n...")
    assert cm["metadata"]["name"] == STATUS_CA_CONFIGMAP and ca_of(cm).startswith("-----BEGIN")
    assert ca_of(None) is None
