"""The operator's metrics scraped for real: Debian's Prometheus scrapes the session operator's
/metrics, and every query of the Grafana dashboard (charts/kubeforge/dashboards) returns data.

The dashboard's variables get their "All" values ($job, $pool: ``.*``) and $__rate_interval a
window of a few scrapes, as Grafana would send them.
"""

from __future__ import annotations

import json

import httpx
import pytest

from conftest import ROOT, apply, running_pods, training_job, wait_for

pytestmark = pytest.mark.cluster

DASHBOARD = ROOT / "charts" / "kubeforge" / "dashboards" / "kubeforge.json"


def expressions() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def grafana(expr: str) -> str:
    return expr.replace("$job", ".*").replace("$pool", ".*").replace("$__rate_interval", "30s")


def test_prometheus_scrapes_the_operator_and_every_dashboard_query_returns_data(cluster, namespace, fleet, capsys):
    from kubeforge.sim.prometheus import Prometheus

    fleet(cliques=1, nodes=2)
    apply(cluster, training_job("scraped", namespace))  # some admissions, reconciles, API calls
    apply(cluster, training_job("waits", namespace, replicas=4))  # and a job that waits
    wait_for(lambda: len(running_pods(cluster, namespace, "scraped")) == 2, timeout=60)
    port = json.loads((cluster.dir / "operator.ports").read_text())["metrics"]
    with Prometheus([f"127.0.0.1:{port}"], job="kubeforge-operator") as prom:
        def scraped():
            r = httpx.get(prom.url + "/api/v1/query", params={"query": 'up{job="kubeforge-operator"}'}, timeout=5).json()
            res = r["data"]["result"]
            return res and res[0]["value"][1] == "1"
        wait_for(scraped, timeout=60, what="Prometheus to scrape the operator")
        wait_for(lambda: (prom.query('min(count_over_time(kubeforge_reconciles_total[30s]))') or 0) >= 3,
                 timeout=60, what="three scrapes of every series (a rate needs two)")
        empty = []
        for title, expr in expressions():
            r = httpx.get(prom.url + "/api/v1/query", params={"query": grafana(expr)}, timeout=10).json()
            assert r["status"] == "success", (title, expr, r)
            if not r["data"]["result"]:
                empty.append(f"{title}: {expr}")
        leader = prom.query('max(kubeforge_leader{job="kubeforge-operator"})')
    with capsys.disabled():
        print(f"\n[metrics] {len(expressions())} dashboard queries against a real Prometheus scraping the operator; "
              f"{len(expressions()) - len(empty)} return data")
    assert not empty, "dashboard queries without data:\n" + "\n".join(empty)
    assert leader == 1.0  # the session operator runs without leader election: it leads
