"""The activator's pure readers: which service a request names, which headers travel, and what
an EndpointSlice says."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from kubeforge.activator import HoldPolicy, identify, parse_slice, service_from_header, service_from_host
from kubeforge.activator._route import MARKER_HEADER, forward_headers, response_headers
from kubeforge.api import (
    DEFAULT_ACTIVATION_HOLD_SECONDS,
    DEFAULT_ACTIVATION_QUEUE_LIMIT,
    HOLD_SECONDS_ANNOTATION,
    QUEUE_LIMIT_ANNOTATION,
    Activation,
)


@pytest.mark.parametrize("host, key", [
    ("llama.ml.svc.cluster.local", ("ml", "llama")),
    ("llama.ml.svc.cluster.local:8000", ("ml", "llama")),
    ("llama.ml.svc.cluster.local.", ("ml", "llama")),
    ("llama.ml.svc", ("ml", "llama")),
    ("llama.ml.svc:80", ("ml", "llama")),
    ("llama.ml", ("ml", "llama")),
    ("Llama.ML:8000", ("ml", "llama")),
    ("llama.ml.svc.corp.example", ("ml", "llama")),  # another cluster domain
    ("llama", None),                # no namespace
    ("llama:8000", None),
    ("10.96.0.12", None),           # the ClusterIP
    ("10.96.0.12:80", None),
    ("[fd00::1]:80", None),
    ("llama.ml.example.com", None),  # three labels and not .svc
    ("", None),
    (None, None),
    ("-bad.ml.svc", None),
])
def test_service_from_host(host, key):
    assert service_from_host(host) == key


@pytest.mark.parametrize("value, key", [
    ("ml/llama", ("ml", "llama")),
    (" ml/llama ", ("ml", "llama")),
    ("llama", None),
    ("ml/", None),
    ("/llama", None),
    ("ml/llama/x", None),
])
def test_service_from_header(value, key):
    assert service_from_header(value) == key


def test_header_wins_over_host_and_says_why_when_nothing_names_a_service():
    assert identify(CIMultiDict({"Host": "10.96.0.12", "X-Kubeforge-Service": "ml/llama"})) == (("ml", "llama"), "header")
    assert identify(CIMultiDict({"Host": "llama.ml.svc"})) == (("ml", "llama"), "host")
    key, why = identify(CIMultiDict({"Host": "10.96.0.12"}))
    assert key is None and "X-Kubeforge-Service" in why
    key, why = identify(CIMultiDict({"Host": "llama.ml.svc", "X-Kubeforge-Service": "nonsense"}))
    assert key is None and "<namespace>/<name>" in why


def test_forward_headers_drop_hop_by_hop_and_add_forwarded_for_and_marker():
    items = [("Host", "llama.ml.svc"), ("Connection", "keep-alive, X-Secret-Hop"), ("Keep-Alive", "5"),
             ("X-Secret-Hop", "1"), ("Transfer-Encoding", "chunked"), ("Authorization", "Bearer t"),
             ("X-Forwarded-For", "1.1.1.1"), ("Accept", "a"), ("Accept", "b"), (MARKER_HEADER, "forged")]
    out = forward_headers(items, "10.0.0.9", "activator-0")
    assert out == [("Host", "llama.ml.svc"), ("Authorization", "Bearer t"), ("Accept", "a"), ("Accept", "b"),
                   ("X-Forwarded-For", "1.1.1.1, 10.0.0.9"), (MARKER_HEADER, "activator-0")]


def test_response_headers_drop_hop_by_hop_only():
    items = [("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked"), ("Set-Cookie", "a=1"),
             ("Set-Cookie", "b=2"), ("Connection", "close")]
    assert response_headers(items) == [("Content-Type", "text/event-stream"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")]


def endpoint_slice(mode="activator", annotations=None, endpoints=None, ports=None, service="llama"):
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": f"kubeforge-{service}", "namespace": "ml", "annotations": annotations or {},
                     "labels": {"kubeforge.io/inference-service": service, "kubeforge.io/endpoints": mode,
                                "kubernetes.io/service-name": service}},
        "endpoints": endpoints if endpoints is not None else [{"addresses": ["10.0.0.5"], "conditions": {"ready": True}}],
        "ports": ports if ports is not None else [{"name": "http", "port": 8012, "protocol": "TCP"}],
    }


def test_parse_activator_slice_with_annotations():
    v = parse_slice(endpoint_slice(annotations=Activation(hold_seconds=60, queue_limit=5).annotations()))
    assert (v.namespace, v.name, v.service, v.mode) == ("ml", "kubeforge-llama", "llama", "activator")
    assert v.addresses == ("10.0.0.5",) and v.port == 8012
    assert v.policy == HoldPolicy(60, 5) and v.problems == ()


def test_parse_defaults_come_from_the_api_package():
    v = parse_slice(endpoint_slice())
    assert v.policy == HoldPolicy(DEFAULT_ACTIVATION_HOLD_SECONDS, DEFAULT_ACTIVATION_QUEUE_LIMIT)
    assert Activation().hold_seconds == DEFAULT_ACTIVATION_HOLD_SECONDS
    assert Activation().queue_limit == DEFAULT_ACTIVATION_QUEUE_LIMIT


@pytest.mark.parametrize("value", ["abc", "0", "-3", "1.5", "99999999"])
def test_bad_annotations_fall_back_to_defaults_with_a_problem(value):
    v = parse_slice(endpoint_slice(annotations={HOLD_SECONDS_ANNOTATION: value, QUEUE_LIMIT_ANNOTATION: value}))
    assert v.policy == HoldPolicy()
    assert len(v.problems) == 2 and all(repr(value) in p for p in v.problems)


def test_parse_replicas_slice_keeps_ready_addresses_once():
    v = parse_slice(endpoint_slice(mode="replicas", ports=[{"name": "metrics", "port": 9000}, {"name": "http", "port": 8000}],
                                   endpoints=[
                                       {"addresses": ["10.0.1.1"], "conditions": {"ready": True}},
                                       {"addresses": ["10.0.1.2"], "conditions": {"ready": False}},
                                       {"addresses": ["10.0.1.3"]},  # nil ready means ready
                                       {"addresses": ["10.0.1.1"]},
                                       {"addresses": ["not-an-ip"]},
                                   ]))
    assert v.addresses == ("10.0.1.1", "10.0.1.3") and v.port == 8000
    assert [b.url for b in v.backends()] == ["http://10.0.1.1:8000", "http://10.0.1.3:8000"]


def test_parse_port_fallbacks():
    assert parse_slice(endpoint_slice(ports=[{"port": 7000}])).port == 7000  # the only port
    v = parse_slice(endpoint_slice(ports=[{"name": "a", "port": 1}, {"name": "b", "port": 2}]))
    assert v.port is None and v.backends() == () and "http" in v.problems[0]
    assert parse_slice(endpoint_slice(endpoints=[], ports=[])).problems == ()  # nothing to dial: no complaint


def test_not_ours_is_none():
    s = endpoint_slice()
    del s["metadata"]["labels"]["kubeforge.io/inference-service"]
    assert parse_slice(s) is None


def test_ipv6_backend_url():
    v = parse_slice(endpoint_slice(mode="replicas", endpoints=[{"addresses": ["fd00::5"]}]))
    assert v.backends()[0].url == "http://[fd00::5]:8012"
