"""The training bench's issue-31 scale target line (e2e.bench.training.report): printed only for a
burst of at least 2,000 gangs on at least 5,000 nodes, from the API server's timestamps and from the
bench's own watch, each with its verdict."""

from __future__ import annotations

from types import SimpleNamespace

from e2e.bench.training.context import Run
from e2e.bench.lib.metrics import counter_delta, scrape_apiserver_watches
from e2e.bench.training.report import _scale_target, watch_line


def run(nodes: int, jobs: int, audit: list[float], watch_p95: float) -> Run:
    r = Run(args=SimpleNamespace(), c=None, fleet_name="f", capacity=nodes * 8, jobs=[object()] * jobs,
            phases=["kubeforge"])
    r.node_clique = {f"n{i}": "c" for i in range(nodes)}
    r.results = {"kubeforge": (None, {"adm_n": jobs, "adm_p95": watch_p95})}
    r.extra = {"create_to_admitted": audit}
    return r


def test_the_scale_target_says_met_by_each_measure_separately(capsys):
    _scale_target(run(5000, 2000, [3.0] * 1800 + [5.0] * 200, 6.62))
    out = capsys.readouterr().out
    assert "2000 gangs on 5000 nodes" in out
    assert "timestamps 5s (n=2000, 1 s resolution): met" in out and "watch 6.62s (its lag included): NOT met" in out


def test_the_scale_target_is_silent_below_its_size(capsys):
    _scale_target(run(1024, 2000, [1.0], 1.0))
    _scale_target(run(5000, 800, [1.0], 1.0))
    assert capsys.readouterr().out == ""


def test_the_scale_target_is_not_met_when_the_api_servers_p95_is_over(capsys):
    _scale_target(run(5000, 2000, [3.0] * 1800 + [7.0] * 200, 4.0))
    out = capsys.readouterr().out
    assert "timestamps 7s (n=2000, 1 s resolution): NOT met" in out and "watch 4.00s (its lag included): met" in out


class _FakeCluster:
    """``kubectl get --raw /metrics`` answering a fixed exposition text."""

    def __init__(self, text: str, rc: int = 0) -> None:
        self.text, self.rc = text, rc

    def kubectl(self, *args, check=True, timeout=120):
        assert args == ("get", "--raw", "/metrics")
        return SimpleNamespace(returncode=self.rc, stdout=self.text, stderr="")


def _exposition(closed_pods: int, sent_tj: int) -> str:
    return "\n".join([
        "# HELP apiserver_terminated_watchers_total [STABLE] Counter of watchers closed due to unresponsiveness",
        f'apiserver_terminated_watchers_total{{group="",resource="pods"}} {closed_pods}',
        'apiserver_terminated_watchers_total{group="kubeforge.io",resource="trainingjobs"} 2',
        'apiserver_watch_cache_events_dispatched_total{group="",resource="pods"} 100',
        f'apiserver_watch_cache_events_dispatched_total{{group="kubeforge.io",resource="trainingjobs"}} {sent_tj}',
        'apiserver_watch_cache_events_dispatched_total{group="",resource="nodes"} 7',
    ])


def test_the_watch_line_gives_the_phases_closed_watchers_and_events_by_resource():
    before = scrape_apiserver_watches(_FakeCluster(_exposition(3, 10)))
    after = scrape_apiserver_watches(_FakeCluster(_exposition(180, 8_000)))
    line = watch_line(counter_delta(before, after))
    assert "(apiserver_terminated_watchers_total) pods 177, trainingjobs 0;" in line
    assert "events dispatched pods 0, trainingjobs 7990" in line


def test_the_watch_line_is_silent_when_the_metrics_cannot_be_read():
    unread = scrape_apiserver_watches(_FakeCluster("", rc=1))
    assert unread is None
    assert watch_line(counter_delta(unread, scrape_apiserver_watches(_FakeCluster(_exposition(1, 1))))) is None
