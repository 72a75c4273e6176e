"""What kubeforge.runtime.client's request path puts on the wire, read by a loopback HTTP server
standing in for the API server: the kubeconfig's bearer token, the path and query, the content
type, the body encoded once (orjson; a generated model object through kubernetes_asyncio's own
serialization), and the answer parsed or refused as before."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from kubernetes_asyncio import client as kclient

from kubeforge.runtime.client import ApiError, KubeClient

TOKEN = "t0ken-for-test"


def run(coro):
    return asyncio.run(coro)


async def serve(seen: list[dict], answer: tuple[int, object]) -> tuple[web.AppRunner, int]:
    async def handler(request: web.Request) -> web.Response:
        seen.append({"method": request.method, "path": request.path, "query": dict(request.query),
                     "auth": request.headers.get("Authorization"), "type": request.headers.get("Content-Type"),
                     "accept": request.headers.get("Accept"), "body": await request.read()})
        code, body = answer
        return web.Response(status=code, body=json.dumps(body).encode(), content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def kubeconfig(tmp_path, port: int) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "t", "user": {"token": TOKEN}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
    }))
    return str(path)


async def with_client(tmp_path, monkeypatch, answer, call):
    seen: list[dict] = []
    runner, port = await serve(seen, answer)
    path = kubeconfig(tmp_path, port)
    monkeypatch.setenv("KUBECONFIG", path)
    # kubernetes_asyncio reads $KUBECONFIG once, at import
    monkeypatch.setattr("kubernetes_asyncio.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    c = KubeClient()
    await c.start()
    try:
        result = await call(c)
    except ApiError as e:
        result = e
    finally:
        await c.close()
        await runner.cleanup()
    return seen, result


def test_a_create_sends_the_token_the_path_and_the_body(tmp_path, monkeypatch):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-0", "labels": {"a": "ü"}},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    seen, ok = run(with_client(tmp_path, monkeypatch, (201, {}), lambda c: c.create("Pod", "ns", pod)))
    assert ok is True
    (req,) = seen
    assert (req["method"], req["path"], req["auth"]) == ("POST", "/api/v1/namespaces/ns/pods", f"Bearer {TOKEN}")
    assert req["type"] == "application/json"
    assert json.loads(req["body"]) == pod


def test_a_status_patch_with_a_query_and_the_answer_read(tmp_path, monkeypatch):
    back = {"metadata": {"name": "j", "resourceVersion": "7"}, "status": {"phase": "Running"}}
    seen, got = run(with_client(tmp_path, monkeypatch, (200, back),
                                lambda c: c.patch("TrainingJob", "ns", "j", {"status": {"phase": "Running"}},
                                                  sub="status", read=True)))
    assert got == back
    (req,) = seen
    assert req["path"] == "/apis/kubeforge.io/v1alpha1/namespaces/ns/trainingjobs/j/status"
    assert req["type"] == "application/merge-patch+json"
    assert json.loads(req["body"]) == {"status": {"phase": "Running"}}


def test_a_get_sends_its_query_and_no_body(tmp_path, monkeypatch):
    seen, got = run(with_client(tmp_path, monkeypatch, (200, {"items": []}),
                                lambda c: c.get("Pod", "ns", labelSelector="a=b,c in (d)", limit=5)))
    assert got == {"items": []}
    (req,) = seen
    assert req["query"] == {"labelSelector": "a=b,c in (d)", "limit": "5"} and req["body"] == b""


def test_a_generated_model_body_goes_through_kubernetes_asyncio_serialization(tmp_path, monkeypatch):
    cm = kclient.V1ConfigMap(metadata=kclient.V1ObjectMeta(name="m"), data={"k": "v"})
    seen, _ = run(with_client(tmp_path, monkeypatch, (201, {}), lambda c: c.request("POST", "/api/v1/namespaces/ns/configmaps", cm)))
    assert json.loads(seen[0]["body"]) == {"metadata": {"name": "m"}, "data": {"k": "v"}}


def test_a_refusal_is_an_api_error_with_the_servers_reason(tmp_path, monkeypatch):
    status = {"kind": "Status", "reason": "Invalid", "message": "spec.x: Invalid value"}
    _, err = run(with_client(tmp_path, monkeypatch, (422, status), lambda c: c.create("Pod", "ns", {"a": 1})))
    assert isinstance(err, ApiError) and (err.code, err.reason, err.transient) == (422, "Invalid", False)


@pytest.mark.parametrize("body", [{1: "int key"}, {"big": 2**70}])
def test_what_orjson_refuses_is_still_sent(tmp_path, monkeypatch, body):
    seen, _ = run(with_client(tmp_path, monkeypatch, (201, {}), lambda c: c.request("POST", "/api/v1/x", body)))
    assert json.loads(seen[0]["body"]) == json.loads(json.dumps(body))
