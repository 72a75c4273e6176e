"""Counters in Prometheus' text exposition, as the benches read them: the API server's
``apiserver_request_total`` (through kubectl), the operator's ``kubeforge_api_requests_total``
(its metrics port), and any sample a control-plane component exposes (its secure port, which
kwokctl lets through without credentials). Every reader answers None or {} when it cannot read.
"""

from __future__ import annotations

import re
import ssl
import urllib.request

from e2e.bench.lib.timing import say

__all__ = ["READ_VERBS", "WATCH_COUNTERS", "counter_delta", "fetch_samples", "parse_counter", "scrape_apiserver",
           "scrape_apiserver_watches", "scrape_operator_requests"]

READ_VERBS = {"GET", "LIST", "WATCH", "WATCHLIST", "CONNECT"}
_COUNTER = re.compile(r'^(\w+)\{(.*)\}\s+(\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_SAMPLE = re.compile(r'^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)')


def parse_counter(text: str, metric: str) -> dict[tuple, float]:
    """Samples of one counter from Prometheus text exposition: ``{sorted label items: value}``."""
    out: dict[tuple, float] = {}
    prefix = metric + "{"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        m = _COUNTER.match(line)
        if not m or m.group(1) != metric:
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(2))))
        out[labels] = out.get(labels, 0.0) + float(m.group(3))
    return out


def scrape_apiserver(c) -> dict[tuple, float] | None:
    """``apiserver_request_total`` from ``kubectl get --raw /metrics`` (the kubeconfig's
    credentials), keyed by (verb, group, resource, subresource, code); None on failure."""
    proc = c.kubectl("get", "--raw", "/metrics", check=False, timeout=60)
    if proc.returncode != 0:
        say(f"API server /metrics not readable: {proc.stderr.strip()[:200]}")
        return None
    out: dict[tuple, float] = {}
    for labels, v in parse_counter(proc.stdout, "apiserver_request_total").items():
        d = dict(labels)
        key = (d.get("verb", ""), d.get("group", ""), d.get("resource", ""), d.get("subresource", ""), d.get("code", ""))
        out[key] = out.get(key, 0.0) + v
    return out


WATCH_COUNTERS = ("apiserver_terminated_watchers_total", "apiserver_watch_cache_events_dispatched_total")
"""The API server's watch-cache counters the training bench reads (k8s.io/apiserver
``pkg/storage/cacher/metrics``): watchers it closed because they did not take their events in
time (the cacher's dispatch budget ran out; the client then watches again), and the events its
watch caches dispatched, both by ``resource``."""


def scrape_apiserver_watches(c) -> dict[tuple[str, str], float] | None:
    """:data:`WATCH_COUNTERS` from ``kubectl get --raw /metrics``, keyed by (counter, resource);
    None on failure."""
    proc = c.kubectl("get", "--raw", "/metrics", check=False, timeout=60)
    if proc.returncode != 0:
        return None
    out: dict[tuple[str, str], float] = {}
    for metric in WATCH_COUNTERS:
        for labels, v in parse_counter(proc.stdout, metric).items():
            key = (metric, dict(labels).get("resource", ""))
            out[key] = out.get(key, 0.0) + v
    return out


def scrape_operator_requests(port: int | None) -> tuple[dict[tuple, float] | None, str]:
    """``kubeforge_api_requests_total`` from the operator's metrics port, keyed by
    (verb, resource, code), and a reason when it is None (no port, unreachable, no counter)."""
    if not port:
        return None, "no metrics port in operator.ports"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode(errors="replace")
    except OSError as e:
        return None, f"metrics port {port} did not answer ({type(e).__name__})"
    samples = parse_counter(text, "kubeforge_api_requests_total")
    if not samples and "kubeforge_api_requests_total" not in text:
        return None, f"metrics port {port} answers without that counter"
    out: dict[tuple, float] = {}
    for labels, v in samples.items():
        d = dict(labels)
        key = (d.get("verb", ""), d.get("resource", ""), d.get("code", ""))
        out[key] = out.get(key, 0.0) + v
    return out, ""


def counter_delta(before: dict | None, after: dict | None) -> dict | None:
    """``after - before`` per key (keys only in ``after`` count from 0); None if either is missing."""
    if before is None or after is None:
        return None
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def fetch_samples(url: str, keep: re.Pattern, insecure_tls: bool = False) -> dict[str, float]:
    """The samples at ``url`` whose ``name{labels}`` matches ``keep``, summed per key; {} when
    unreadable. ``insecure_tls``: a component's self-signed secure port."""
    ctx = None
    if insecure_tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=10, context=ctx) as r:
            text = r.read().decode(errors="replace")
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            key = m.group(1) + (m.group(2) or "")
            if keep.match(key):
                out[key] = out.get(key, 0.0) + float(m.group(3))
    return out
