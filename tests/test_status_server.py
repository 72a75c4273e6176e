"""The status endpoint over real HTTPS on loopback, with a fake API client for TokenReviews and a
cache stand-in: every refusal's code and message, the rate limit, the review cache and bound, the
follower's 503, the report reaching the book and the job's queue, and the TLS Secret's life."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from kubeforge.objects import Pod
from kubeforge.progress import Report, status_path
from kubeforge.runtime import status_auth, status_server
from kubeforge.runtime.client import ApiError
from kubeforge.runtime.state import Options, Runtime
from kubeforge.runtime.status_book import ReportBook
from kubeforge.runtime.status_server import StatusServer
from kubeforge.runtime.status_tls import covers, make_cert, serving_cert
from records import mk_job

NS, JOB = "team-a", "llm"
KEY = (NS, JOB)
EXP = int(time.time()) + 3600


def jwt(pod: str = f"{JOB}-worker-0-1", ns: str = NS, aud: str = "kubeforge.io", exp: float | None = None) -> str:
    def enc(o):
        return base64.urlsafe_b64encode(json.dumps(o).encode()).rstrip(b"=").decode()
    claims = {"aud": [aud], "exp": exp or EXP,
              "kubernetes.io": {"namespace": ns, "pod": {"name": pod, "uid": "u"}, "serviceaccount": {"name": "default"}}}
    return f"{enc({'alg': 'RS256'})}.{enc(claims)}.sig-{pod}"


class FakeClient:
    """TokenReviews only: a token is authenticated when it ends with a known signature."""

    def __init__(self) -> None:
        self.reviews = 0
        self.fail: ApiError | None = None
        self.secrets: dict[str, dict] = {}

    async def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        if path.endswith("/tokenreviews"):
            self.reviews += 1
            if self.fail:
                raise self.fail
            token = body["spec"]["token"]
            claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
            k8s = claims["kubernetes.io"]
            ok = token.rsplit(".", 1)[1].startswith("sig-")
            return {"status": {"authenticated": ok, "audiences": body["spec"]["audiences"], "error": "" if ok else "bad",
                               "user": {"username": f"system:serviceaccount:{k8s['namespace']}:default",
                                        "extra": {"authentication.kubernetes.io/pod-name": [k8s["pod"]["name"]]}}}}
        return await self._secret(method, path, body)

    async def _secret(self, method: str, path: str, body: Any) -> Any:
        if method == "GET":
            if path not in self.secrets:
                raise ApiError(404, "NotFound", "no")
            return self.secrets[path]
        name = body["metadata"]["name"]
        full = path if method == "PUT" else f"{path}/{name}"
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": str(len(self.secrets) + 1)}}
        self.secrets[full] = body
        return None


@dataclass
class FakeCache:
    status: dict = field(default_factory=lambda: {"attempt": 1})
    pods: list = field(default_factory=list)
    exists: bool = True

    def job(self, key):
        return mk_job(JOB, ns=NS, status=self.status) if self.exists and key == KEY else None

    def effective(self, key, rec):
        return rec

    def job_pods(self, key):
        return self.pods


class FakeQueue:
    def __init__(self) -> None:
        self.after: list[tuple] = []

    def add_after(self, key, seconds):
        self.after.append((key, seconds))


@dataclass
class FakeRuntime:
    client: FakeClient = field(default_factory=FakeClient)
    cache: FakeCache = field(default_factory=FakeCache)
    options: Options = field(default_factory=lambda: Options(status_url="https://127.0.0.1:1", progress_write_seconds=30))
    reports: ReportBook = field(default_factory=ReportBook)
    leading: asyncio.Event = field(default_factory=asyncio.Event)
    jobs: FakeQueue = field(default_factory=FakeQueue)
    status_ca: str | None = None
    progress_interval = Runtime.progress_interval


def worker(rank: int, attempt: int = 1, phase: str = "Running") -> Pod:
    return Pod(namespace=NS, name=f"{JOB}-worker-{rank}-{attempt}", job=JOB, rank=rank, attempt=attempt, phase=phase)


async def serve(rt: FakeRuntime) -> tuple[StatusServer, ssl.SSLContext]:
    rt.leading.set()
    rt.cache.pods = rt.cache.pods or [worker(0), worker(1), worker(0, attempt=0, phase="Failed")]
    srv = StatusServer(rt, "127.0.0.1:0")
    await srv.start()
    return srv, ssl.create_default_context(cadata=rt.status_ca)


async def post(srv: StatusServer, ctx: ssl.SSLContext, payload: Any, token: str | None = None, kubeflow: bool = False,
               raw: bytes | None = None, host: str = "127.0.0.1") -> tuple[int, dict, Any]:
    url = f"https://{host}:{srv.port}{status_path(NS, JOB, kubeflow=kubeflow)}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = raw if raw is not None else json.dumps(payload).encode()
    async with aiohttp.ClientSession() as s:
        async with s.post(url, data=data, headers=headers, ssl=ctx) as r:
            return r.status, await r.json(), r.headers.get("Retry-After")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_accepted_reports_reach_the_book_and_queue_the_job_once_due():
    async def go():
        rt = FakeRuntime()
        srv, ctx = await serve(rt)
        try:
            code, body, _ = await post(srv, ctx, {"step": 5, "totalSteps": 100}, jwt())
            assert code == 200 and body["status"] == "Success"
            code, _, _ = await post(srv, ctx, {"trainerStatus": {"progressPercentage": 7}}, jwt(), kubeflow=True)
            assert code == 200
            rep = rt.reports.get(KEY)
            assert (rep.step, rep.percent, rep.reporter, rep.attempt) == (5, 7.0, f"{JOB}-worker-0-1", 1)
            # no progress written yet: due at once
            assert rt.jobs.after and all(k == KEY and d <= 0.2 for k, d in rt.jobs.after)  # within a slot of the budget
            rt.cache.status = {"attempt": 1, "progress": {"lastReportTime": "2099-01-01T00:00:00.000Z"}}
            await post(srv, ctx, {"step": 6}, jwt())
            assert rt.jobs.after[-1][1] > 30  # written recently (here: in the future): waits the interval
            assert rt.client.reviews == 1  # one token, one review
        finally:
            await srv.stop()
    run(go())


@pytest.mark.parametrize("case,code,words", [
    ("no token", 401, "no Authorization header"),
    ("not a jwt", 401, "not a JWT"),
    ("pod's default token", 401, "audience"),
    ("other namespace", 403, "namespace 'team-b'"),
    ("refused by the API server", 401, "token refused"),
    ("other attempt", 403, "belongs to attempt 0"),
    ("ended pod", 403, "has ended"),
    ("not a worker", 403, "is not a worker"),
    ("job gone", 404, "not found"),
    ("schema", 422, "step: Input should be a valid integer"),
    ("not json", 400, "not a JSON object"),
    ("too large", 413, "at most 16384"),
])
def test_refusals(case, code, words):
    tokens = {"not a jwt": "abc", "pod's default token": jwt(aud="https://kubernetes.default.svc"),
              "other namespace": jwt(ns="team-b"), "refused by the API server": jwt().rsplit(".", 1)[0] + ".forged",
              "other attempt": jwt(f"{JOB}-worker-0-0"), "ended pod": jwt(f"{JOB}-worker-1-1"),
              "not a worker": jwt("someone-else")}

    async def go():
        rt = FakeRuntime()
        if case == "ended pod":
            rt.cache.pods = [worker(0), worker(1, phase="Succeeded")]
        if case == "job gone":
            rt.cache.exists = False
        srv, ctx = await serve(rt)
        try:
            token = None if case == "no token" else tokens.get(case, jwt())
            raw = {"not json": b"{", "too large": b"x" * 20000}.get(case)
            payload = {"step": "1"} if case == "schema" else {"step": 1}
            got, body, _ = await post(srv, ctx, payload, token, raw=raw)
            assert (got, body["code"], body["status"]) == (code, code, "Failure")
            assert words in body["message"], body["message"]
            assert rt.reports.get(KEY) is None
        finally:
            await srv.stop()
    run(go())


def test_a_flood_from_one_job_gets_429_with_retry_after_and_costs_no_review(monkeypatch):
    monkeypatch.setattr(status_server, "REPORTS_PER_SECOND", 0.05)  # no refill worth counting, however slow the machine

    async def go():
        rt = FakeRuntime()
        srv, ctx = await serve(rt)
        try:
            codes = [(await post(srv, ctx, {"step": i}, jwt()))[0] for i in range(25)]
            assert codes[:20] == [200] * 20 and set(codes[20:]) == {429}
            code, body, retry = await post(srv, ctx, {"step": 99}, jwt())
            assert code == 429 and int(retry) >= 1 and "report less often" in body["message"]
            assert rt.client.reviews == 1
        finally:
            await srv.stop()
    run(go())


def test_a_follower_answers_503_with_retry_after():
    async def go():
        rt = FakeRuntime()
        srv, ctx = await serve(rt)
        rt.leading.clear()
        try:
            code, body, retry = await post(srv, ctx, {"step": 1}, jwt())
            assert (code, retry) == (503, "1") and "not the leader" in body["message"]
            assert rt.client.reviews == 0
        finally:
            await srv.stop()
    run(go())


def test_api_server_unreachable_is_503_and_not_cached():
    async def go():
        rt = FakeRuntime()
        srv, ctx = await serve(rt)
        try:
            rt.client.fail = ApiError(0, "NoResponse", "timeout")
            code, _, retry = await post(srv, ctx, {"step": 1}, jwt())
            assert code == 503 and retry == "1"
            rt.client.fail = None
            assert (await post(srv, ctx, {"step": 1}, jwt()))[0] == 200
        finally:
            await srv.stop()
    run(go())


def test_token_reviews_are_bounded(monkeypatch):
    monkeypatch.setattr(status_auth, "REVIEW_BURST", 2.0)
    monkeypatch.setattr(status_auth, "REVIEWS_PER_SECOND", 0.01)

    async def go():
        rt = FakeRuntime()
        rt.cache.pods = [worker(r) for r in range(4)]
        srv, ctx = await serve(rt)
        try:
            codes = [(await post(srv, ctx, {"step": 1}, jwt(f"{JOB}-worker-{r}-1")))[0] for r in range(4)]
            assert codes == [200, 200, 429, 429] and rt.client.reviews == 2
        finally:
            await srv.stop()
    run(go())


def test_unknown_paths_are_404():
    async def go():
        rt = FakeRuntime()
        srv, ctx = await serve(rt)
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(f"https://127.0.0.1:{srv.port}/", ssl=ctx) as r:
                    assert r.status == 404
        finally:
            await srv.stop()
    run(go())


def test_the_certificate_covers_localhost_and_the_url_host():
    async def go():
        rt = FakeRuntime()
        srv, ctx = await serve(rt)
        try:
            assert (await post(srv, ctx, {"step": 1}, jwt(), host="localhost"))[0] == 200
        finally:
            await srv.stop()
    run(go())
    sc = make_cert(["kubeforge-status.kf.svc", "127.0.0.1"], time.time())
    assert covers(sc.cert, ["kubeforge-status.kf.svc", "127.0.0.1"], time.time())
    assert not covers(sc.cert, ["other.svc"], time.time())
    assert not covers(sc.cert, ["127.0.0.1"], time.time() + 300 * 86400)  # under 90 days left: renewed


def test_the_tls_secret_is_made_once_shared_and_renewed_with_the_same_ca():
    async def go():
        c = FakeClient()
        now = time.time()
        first = await serving_cert(c, ("kf", "status-tls"), ["a.svc"], now)
        again = await serving_cert(c, ("kf", "status-tls"), ["a.svc"], now)
        assert again == first  # the second replica reads the first one's
        renewed = await serving_cert(c, ("kf", "status-tls"), ["a.svc", "b.svc"], now)
        assert renewed.ca == first.ca and renewed.cert != first.cert
        assert covers(renewed.cert, ["a.svc", "b.svc"], now)
    run(go())
    assert status_server.server_hosts("https://kubeforge-status.kf.svc:8443") == [
        "kubeforge-status.kf.svc", "localhost", "127.0.0.1"]


def test_the_progress_interval_grows_past_the_write_budget():
    rt = FakeRuntime(options=Options(progress_write_seconds=30, progress_writes_per_second=10))
    assert rt.progress_interval() == 30
    for i in range(1000):
        rt.reports.put(("ns", f"j{i}"), Report(received=0.0))
    assert rt.progress_interval() == 100  # 1,000 reporting jobs, 10 writes a second in all
    rt.options.progress_writes_per_second = 0
    assert rt.progress_interval() == 30


def test_first_writes_are_paced_by_the_write_budget():
    async def go():
        rt = FakeRuntime(options=Options(status_url="https://127.0.0.1:1", progress_write_seconds=30,
                                         progress_writes_per_second=4))
        srv = StatusServer(rt, "127.0.0.1:0")
        now = time.time()
        delays = [srv._schedule(("ns", f"j{i}"), {}, now) for i in range(8)]
        assert delays == pytest.approx([0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75])  # 4 a second
        again = srv._schedule(("ns", "j7"), {}, now)  # the same job reporting again keeps its slot
        assert again == pytest.approx(1.75) and len(rt.jobs.after) == 8
    run(go())


def test_every_answer_code_has_a_series_from_the_start() -> None:
    """The dashboard's "progress reports by answer" panel has data before the first report:
    metrics.serve starts a series at 0 for each code the endpoint answers."""
    from kubeforge import metrics
    from kubeforge.runtime import status_server

    assert set(status_server.REASONS) | {200} == set(metrics.STATUS_REPORT_CODES)
