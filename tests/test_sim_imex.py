"""The sim's stand-in for NVIDIA's ComputeDomain controller and IMEX daemons
(:mod:`kubeforge.sim.imex`), on a fake client that binds every call to the real kubernetes
client's signature (the stand-in once passed a namespaced path's arguments in the wrong order,
got "404 page not found" and took it for an object gone)."""

from __future__ import annotations

import inspect
import json
import logging
from types import SimpleNamespace

from kubernetes import client
from kubernetes.client.rest import ApiException

from kubeforge.sim import imex

UID = "cd-uid"


def domain(status=None, finalizers=(), deleting=False):
    md = {"name": "gang-imex", "namespace": "ns", "uid": UID, "resourceVersion": "7", "finalizers": list(finalizers)}
    if deleting:
        md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body = {"metadata": md, "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "gang-imex-channel"}}}}
    if status is not None:
        body["status"] = status
    return body


def channel_claim(node):
    return {"metadata": {"name": f"c-{node}", "namespace": "ns", "labels": {imex.DOMAIN_LABEL: UID}},
            "status": {"allocation": {"devices": {"results": [{"pool": node, "device": "channel-0"}]}}}}


class FakeApi:
    """CustomObjectsApi + CoreV1Api: every call is bound to the real method's signature (a wrong
    argument order fails here as it fails on the API server), then recorded by parameter name."""

    def __init__(self, domains, claims, nodes=(), refuse=None):
        self.domains, self.claims, self.nodes, self.refuse = domains, claims, nodes, refuse
        self.calls: list[tuple[str, dict]] = []

    def _bind(self, cls, method, *a, **kw):
        sig = inspect.signature(getattr(cls, method))
        args = sig.bind(None, *a, **kw).arguments
        args.pop("self")
        self.calls.append((method, args))
        return args

    def list_cluster_custom_object(self, *a, **kw):
        args = self._bind(client.CustomObjectsApi, "list_cluster_custom_object", *a, **kw)
        return {"items": self.domains if args["plural"] == "computedomains" else self.claims}

    def list_node(self, *a, **kw):
        self._bind(client.CoreV1Api, "list_node", *a, **kw)
        return SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(name=n, labels={"nvidia.com/gpu.clique": "c0"}))
                                     for n in self.nodes])

    def __getattr__(self, method):
        def call(*a, **kw):
            args = self._bind(client.CustomObjectsApi, method, *a, **kw)
            if self.refuse and method == self.refuse[0]:
                raise ApiException(status=self.refuse[1], reason="Unprocessable Entity")
            assert args["plural"] in ("computedomains", "resourceclaimtemplates"), args
            return {}
        return call

    def named(self, method):
        return [args for m, args in self.calls if m == method]


def test_adds_the_finalizer_makes_the_channel_template_and_reports_daemons_ready_after_the_delay():
    api = FakeApi([domain()], [channel_claim("n1"), channel_claim("n2")], nodes=["n1", "n2"])
    seen: dict = {}
    imex.step(api, api, seen, delay=2.0, now=100.0)
    (fin,) = api.named("patch_namespaced_custom_object")
    assert (fin["namespace"], fin["plural"], fin["name"]) == ("ns", "computedomains", "gang-imex")
    assert fin["body"]["metadata"] == {"finalizers": [imex.FINALIZER], "resourceVersion": "7"}
    (tmpl,) = api.named("create_namespaced_custom_object")
    assert tmpl["body"]["spec"]["metadata"]["labels"] == {imex.DOMAIN_LABEL: UID}
    (st,) = api.named("patch_namespaced_custom_object_status")
    assert st["body"]["status"]["status"] == "NotReady"
    assert [(n["name"], n["status"], n["cliqueID"]) for n in st["body"]["status"]["nodes"]] == [
        ("n1", "NotReady", "c0"), ("n2", "NotReady", "c0")]
    api2 = FakeApi([domain(st["body"]["status"], [imex.FINALIZER])], api.claims, nodes=["n1", "n2"])
    imex.step(api2, api2, seen, delay=2.0, now=102.5)
    (st2,) = api2.named("patch_namespaced_custom_object_status")
    assert st2["body"]["status"]["status"] == "Ready" and not api2.named("patch_namespaced_custom_object")


def test_a_deleted_domain_loses_its_template_and_the_drivers_finalizer_once_ours_is_gone():
    api = FakeApi([domain(finalizers=["kubeforge.io/compute-domain", imex.FINALIZER], deleting=True)], [])
    imex.step(api, api, {}, delay=2.0, now=100.0)
    assert [a["name"] for a in api.named("delete_namespaced_custom_object")] == ["gang-imex-channel"]
    assert not api.named("patch_namespaced_custom_object")  # kubeforge's finalizer first
    api = FakeApi([domain(finalizers=[imex.FINALIZER], deleting=True)], [])
    imex.step(api, api, {}, delay=2.0, now=100.0)
    (fin,) = api.named("patch_namespaced_custom_object")
    assert fin["body"]["metadata"]["finalizers"] == []


def test_a_refused_status_write_is_logged_never_swallowed(caplog):
    api = FakeApi([domain(finalizers=[imex.FINALIZER])], [channel_claim("n1")], nodes=["n1"],
                  refuse=("patch_namespaced_custom_object_status", 422))
    with caplog.at_level(logging.WARNING, logger="kubeforge.sim.imex"):
        imex.step(api, api, {}, delay=2.0, now=100.0)
    assert any("writing status: 422" in r.getMessage() for r in caplog.records), caplog.records


def test_a_404_that_is_no_status_is_a_wrong_path_and_is_logged(caplog):
    gone = ApiException(status=404, reason="Not Found")
    gone.body = json.dumps({"kind": "Status", "reason": "NotFound", "code": 404})
    wrong = ApiException(status=404, reason="Not Found")
    wrong.body = "404 page not found"
    with caplog.at_level(logging.WARNING, logger="kubeforge.sim.imex"):
        imex._call("gone", (404,), _raise(gone))
        assert not caplog.records
        imex._call("wrong path", (404,), _raise(wrong))
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["wrong path"]


def _raise(e):
    def fn():
        raise e
    return fn
