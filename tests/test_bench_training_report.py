"""The training bench's issue-31 scale target line (e2e.bench.training.report): printed only for a
burst of at least 2,000 gangs on at least 5,000 nodes, from the API server's timestamps and from the
bench's own watch, each with its verdict."""

from __future__ import annotations

from types import SimpleNamespace

from e2e.bench.training.context import Run
from e2e.bench.training.report import _scale_target


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
