"""Where a progress report's CPU goes: py-spy's collapsed stacks of the reporting micro bench's
server (``python -m e2e.bench.reporting_micro --py-spy FILE --py-spy-format raw --native``)
summed into a few kinds of work.

Each sample is put in the kind of the first frame, from the leaf up, that a rule names (so a
``Py_DECREF`` under pydantic's validation counts as validation). Samples where the process
waits (``epoll_pwait``) are left out: py-spy's ``--native`` mode cannot always tell them from
work. Shares are of the samples left, so with the micro bench's CPU per report they give
milliseconds per report per kind.

Run: ``.venv/bin/python -m e2e.bench.reporting_profile FILE [--ms-per-report 1.14]``.
"""

from __future__ import annotations

import argparse
import collections
import re

IDLE = re.compile(r"^(epoll_pwait|epoll_wait|select|poll)$")
RULES: list[tuple[str, re.Pattern]] = [
    ("socket write syscall (kernel TCP)", re.compile(r"^(write|writev|send|sendmsg)$")),
    ("socket read syscall (kernel TCP)", re.compile(r"^(read|readv|recv|recvmsg)$")),
    ("TLS crypto (OpenSSL)", re.compile(r"^(_ssl__|SSL_|ssl3_|tls1?_|EVP_|aes|ossl_|ecp_|CRYPTO_|gcm)")),
    ("TLS records (uvloop sslproto)", re.compile(r"^(SSLProtocol|SSLObject\.)")),
    ("garbage collector", re.compile(r"^(gc_collect|_PyObject_GC|collect)")),
    ("HTTP parse (aiohttp's llhttp parser)", re.compile(r"^(llhttp|HttpParser|HttpRequestParser|_http_parser)")),
    ("handler: schema validation (pydantic)", re.compile(r"^(parse_report|_validate|BaseModel\.|_explain)")),
    ("handler: answer JSON + Response", re.compile(r"^(answer|status_body|json_response|dumps|JSONEncoder)")),
    ("handler: metrics (prometheus)", re.compile(r"^(MutexValue|Counter\.|_MultiProcessValue|inc)$|^(MutexValue|Counter)\.")),
    ("handler: token cache (sha256, lookup)", re.compile(r"^(Authenticator\.|bearer|token_key|openssl_sha256|_hashlib)")),
    ("handler: report book (merge)", re.compile(r"^(ReportBook\.|merge_reports|replace|_newest)")),
    ("handler: pod check", re.compile(r"^reporting_pod")),
    ("handler: rate limit + write schedule", re.compile(r"^(Buckets\.|TokenBucket\.|StatusServer\._schedule|last_report_time|parse_stamp|Runtime\.progress_interval|FakeQueue|FakeRuntime)")),
    ("handler: the rest (checks, messages)", re.compile(r"^(StatusServer\.|_guarded|_kubeforge|_kubeflow|_answer_)")),
    ("aiohttp: routing", re.compile(r"^(UrlDispatcher|Resource\.|DynamicResource|PlainResource|UrlMappingMatchInfo|MatchInfo)")),
    ("aiohttp: request/response objects, headers, body read", re.compile(
        r"^(StreamResponse|Response\.|Request\.|BaseRequest|StreamReader|StreamWriter|RequestHandler\.(data_received|_make_request)|"
        r"Application\.|URL\.|yarl|CIMultiDict|multidict|HttpVersion|RawRequestMessage|reify|_RequestContextManager|"
        r"web_|http_writer|helpers\.)")),
    ("aiohttp: connection handler loop (RequestHandler)", re.compile(r"^RequestHandler\.")),
    ("event loop, tasks, callbacks", re.compile(r"^(task_step|Task|Handle__run|Loop__|uv_|uv__|call_soon|future_|Future|loop_)")),
]


def classify(frames: list[str]) -> str | None:
    """The kind of one stack (frames root first, ``name (file:line)``); None for an idle one."""
    names = [f.split(" (", 1)[0] for f in frames]
    if names and IDLE.match(names[-1]):
        return None
    for name in reversed(names):
        for kind, rule in RULES:
            if rule.match(name):
                return kind
    return "other"


def summarise(path: str) -> tuple[collections.Counter, int, int]:
    """Samples by kind, the samples counted, and the idle ones left out."""
    kinds: collections.Counter = collections.Counter()
    idle = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not stack or not n.isdigit():
                continue
            kind = classify(stack.split(";"))
            if kind is None:
                idle += int(n)
            else:
                kinds[kind] += int(n)
    return kinds, sum(kinds.values()), idle


def main(argv: list[str] | None = None) -> int:
    """Print the breakdown."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.reporting_profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("path", help="py-spy's raw (collapsed) output")
    ap.add_argument("--ms-per-report", type=float, default=0.0, help="the micro bench's CPU per report, to print ms")
    args = ap.parse_args(argv)
    kinds, total, idle = summarise(args.path)
    print(f"{total} samples of work ({idle} idle left out)")
    for kind, n in kinds.most_common():
        ms = f"  {args.ms_per_report * n / total:.3f} ms" if args.ms_per_report else ""
        print(f"  {100 * n / total:5.1f} %{ms}  {kind}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
