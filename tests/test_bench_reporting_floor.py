"""The reporting floor bench's pure parts (e2e/bench/reporting_floor.py): its defaults are the
live bench's load shape, its route is kubeforge's report path, and an unknown kind is refused
before anything starts."""

from __future__ import annotations

from kubeforge.progress import status_path

from e2e.bench import reporting, reporting_floor


def test_defaults_are_the_live_benchs_load():
    a, live = reporting_floor.parse_args([]), reporting.parse_args([])
    assert (a.jobs, a.rate) == (live.jobs, live.jobs / live.interval)  # 1,000 kept connections, 100 a second
    assert a.kinds.split(",")[0] == "aiohttp"  # what the endpoint runs on is always measured


def test_the_route_is_kubeforges_report_path():
    assert reporting_floor.ROUTE.format(namespace="rep", name="j0001") == status_path("rep", "j0001")


def test_an_unknown_kind_is_refused_before_any_server_starts(capsys):
    assert reporting_floor.main(["--kinds", "aiohttp,nginx"]) == 2
    assert "nginx" in capsys.readouterr().err
