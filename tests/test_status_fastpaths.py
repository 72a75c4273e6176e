"""The status endpoint's per-report shortcuts change no answer: the ``Status`` response is the
one ``web.json_response`` made of the object, byte for byte; and a known token's remembered cache
key saves only its hash (the verdict, its expiry and its namespace are still read on every
report, and a header never stands for another token)."""

from __future__ import annotations

import asyncio
import base64
import json
import random

import pytest
from aiohttp import web

from kubeforge.progress import AuthError
from kubeforge.runtime import status_auth
from kubeforge.runtime.status_auth import Authenticator
from kubeforge.runtime.status_server import REASONS, answer, status_body

HOSTILE = ["", "report accepted", 'q"uo\\te', "ünïcødé \u2028\u2029", "\x00\x1f\x7f\n\t\r", "\ud800 lone", "😀" * 3,
           "</script>", "{}", "a" * 5000]


def old_answer(code: int, message: str, retry: str | None = None) -> web.Response:
    """The answer as it was built before (the whole object through ``web.json_response``)."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Success" if code < 400 else "Failure",
            "message": message, "code": code}
    if code >= 400:
        body["reason"] = REASONS.get(code, "InternalError")
    return web.json_response(body, status=code, headers={"Retry-After": retry} if retry else None)


def random_message(rng: random.Random) -> str:
    return "".join(chr(rng.choice([rng.randrange(0, 128), rng.randrange(128, 0x800), rng.randrange(0x800, 0x110000)]))
                   for _ in range(rng.randrange(0, 40)))


@pytest.mark.parametrize("code", [200, 400, 401, 403, 404, 413, 422, 429, 500, 503, 418])
def test_the_answer_is_json_responses_byte_for_byte(code):
    rng = random.Random(code)
    for message in HOSTILE + [random_message(rng) for _ in range(200)]:
        for retry in (None, "1", "17"):
            new, old = answer(code, message, retry), old_answer(code, message, retry)
            assert new.body == old.body
            assert list(new.headers.items()) == list(old.headers.items())
            assert (new.status, new.reason, new.content_type, new.charset) == (old.status, old.reason, old.content_type,
                                                                               old.charset)
            assert json.loads(new.body)["message"] == message


def test_status_body_is_the_objects_json():
    assert status_body(200, "ok") == b'{"kind": "Status", "apiVersion": "v1", "status": "Success", "message": "ok", "code": 200}'
    assert json.loads(status_body(429, "slow")) == {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                    "message": "slow", "code": 429, "reason": "TooManyRequests"}


# --- the token's remembered cache key -------------------------------------------------------------


def jwt(pod: str, ns: str = "team-a", exp: float = 2_000_000_000, sig: str = "sig") -> str:
    def enc(o):
        return base64.urlsafe_b64encode(json.dumps(o).encode()).rstrip(b"=").decode()
    claims = {"aud": ["kubeforge.io"], "exp": exp, "kubernetes.io": {"namespace": ns, "pod": {"name": pod, "uid": "u"}}}
    return f"{enc({'alg': 'RS256'})}.{enc(claims)}.{sig}-{pod}"


class Reviews:
    """A TokenReview answer per token: authenticated when its signature starts with ``sig``."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def request(self, method, path, body=None, **kw):
        token = body["spec"]["token"]
        self.sent.append(token)
        k8s = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))["kubernetes.io"]
        return {"status": {"authenticated": token.rsplit(".", 1)[1].startswith("sig"),
                           "user": {"username": f"system:serviceaccount:{k8s['namespace']}:default",
                                    "extra": {"authentication.kubernetes.io/pod-name": [k8s["pod"]["name"]]}}}}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def authenticator(hashes: list[str], monkeypatch) -> tuple[Authenticator, Reviews, Clock]:
    real = status_auth.token_key

    def counted(token: str) -> str:
        hashes.append(token)
        return real(token)
    monkeypatch.setattr(status_auth, "token_key", counted)
    client, clock = Reviews(), Clock()
    return Authenticator(client, "kubeforge.io", wall=lambda: 1_900_000_000.0, clock=clock), client, clock


def identify(auth: Authenticator, header: str, ns: str = "team-a"):
    return asyncio.run(auth.identify(header, ns))


def test_a_known_token_is_not_hashed_again_and_keeps_its_identity(monkeypatch):
    hashes: list[str] = []
    auth, client, _ = authenticator(hashes, monkeypatch)
    a, b = "Bearer " + jwt("llm-worker-0-1"), "Bearer " + jwt("llm-worker-1-1")
    assert identify(auth, a).pod == "llm-worker-0-1"  # reviewed
    assert identify(auth, a).pod == "llm-worker-0-1"  # from the cache, its key remembered
    n = len(hashes)
    for _ in range(5):
        assert identify(auth, a).pod == "llm-worker-0-1"
        assert identify(auth, b).pod == "llm-worker-1-1"  # another token: its own verdict, never a's
    assert len(hashes) == n + 2  # b hashed for its review and its first cache hit, a never again
    assert len(client.sent) == 2


def test_a_remembered_key_still_honours_the_verdicts_expiry(monkeypatch):
    hashes: list[str] = []
    auth, client, clock = authenticator(hashes, monkeypatch)
    a = "Bearer " + jwt("llm-worker-0-1")
    identify(auth, a)
    identify(auth, a)
    clock.t += status_auth.CACHE_SECONDS + 1  # the verdict has expired: the token is reviewed again
    assert identify(auth, a).pod == "llm-worker-0-1"
    assert len(client.sent) == 2


def test_a_remembered_key_still_checks_the_namespace(monkeypatch):
    auth, _, _ = authenticator([], monkeypatch)
    a = "Bearer " + jwt("llm-worker-0-1")
    identify(auth, a)
    identify(auth, a)
    with pytest.raises(AuthError) as e:
        identify(auth, a, ns="team-b")
    assert e.value.code == 403 and "team-b" in e.value.message


def test_a_refused_token_is_not_remembered_and_stays_refused(monkeypatch):
    hashes: list[str] = []
    auth, client, _ = authenticator(hashes, monkeypatch)
    bad = "Bearer " + jwt("llm-worker-0-1", sig="forged")
    for _ in range(3):
        with pytest.raises(AuthError) as e:
            identify(auth, bad)
        assert e.value.code == 401
    assert len(client.sent) == 1 and len(hashes) == 3  # hashed every time: never remembered


def test_headers_that_differ_by_a_byte_are_different_tokens(monkeypatch):
    auth, client, _ = authenticator([], monkeypatch)
    a = "Bearer " + jwt("llm-worker-0-1")
    identify(auth, a)
    identify(auth, a)
    forged = a[:-1] + ("x" if a[-1] != "x" else "y")  # same pod claim, another signature
    assert identify(auth, forged).pod == "llm-worker-0-1"  # the fake accepts any "sig" signature: reviewed
    assert len(client.sent) == 2
    assert identify(auth, "Bearer  " + a[7:] + " ").pod == "llm-worker-0-1"  # the same token: its cached verdict
    assert len(client.sent) == 2


def test_remembered_keys_are_bounded(monkeypatch):
    monkeypatch.setattr(status_auth, "KEY_ENTRIES", 2)
    hashes: list[str] = []
    auth, client, _ = authenticator(hashes, monkeypatch)
    pods = [f"llm-worker-{r}-1" for r in range(5)]
    for pod in pods * 3:
        assert identify(auth, "Bearer " + jwt(pod)).pod == pod
    # 5 reviews, 5 first cache hits, then 5 more hashes: 5 headers never fit a map of 2 (unbounded: 10)
    assert len(client.sent) == 5 and len(hashes) == 15
