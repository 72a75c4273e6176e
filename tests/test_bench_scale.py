"""The scale bench's parts at tiny sizes (e2e.bench.scale): the fleet's layout, gangs from the
trace (read again when it runs out), the four rounds through the pure admission core, the
report's arithmetic and the size flag. Figures are not asserted: benches measure."""

from __future__ import annotations

import math

import pytest

from e2e.bench.lib.traces import ALIBABA_PODS, default_trace
from e2e.bench.scale import report
from e2e.bench.scale.cli import parse_args, parse_sizes
from e2e.bench.scale.memory import proc_status_kib
from e2e.bench.scale.rounds import LATE_PRIORITY, ROUNDS, late_split, measure
from e2e.bench.scale.workload import BLOCK, CLIQUE, GPU, fleet, gangs, job_views, pool, snapshot

TRACE = default_trace(ALIBABA_PODS)


def test_fleet_layout_domains_of_8_nodes_and_blocks_of_16_domains():
    nodes = fleet(200)
    assert len(nodes) == 200
    n = list(nodes.values())
    assert n[0].labels[CLIQUE] == n[7].labels[CLIQUE] != n[8].labels[CLIQUE]
    assert n[0].labels[BLOCK] == n[127].labels[BLOCK] == "ib0" and n[128].labels[BLOCK] == "ib1"
    assert all(x.allocatable[GPU] == 8 for x in n)


def test_gangs_are_unique_and_read_the_trace_again_when_it_runs_out():
    batch = gangs(TRACE, 9000, seed=7)  # the shipped trace has 7,064 GPU tasks
    assert len(batch) == 9000
    assert len({(g.namespace, g.name) for g in batch}) == 9000
    assert {g.name.split("-")[0] for g in batch} >= {"p0", "p1"}
    assert all(1 <= g.replicas <= 4 and g.gpus >= 1 for g in batch)
    assert [g.created for g in batch] == sorted(g.created for g in batch)
    def shape(gs):
        return [(g.name, g.replicas, g.gpus, g.priority) for g in gs]

    assert shape(gangs(TRACE, 50, seed=7)) == shape(batch[:50])  # deterministic


def test_job_views_pending_running_and_finished():
    batch = gangs(TRACE, 3)
    keys = [(g.namespace, g.name) for g in batch]
    views = job_views(batch, placed={keys[1]: ("n00000",)}, finished=frozenset([keys[2]]))
    assert views[keys[0]].phase == "Pending" and views[keys[0]].placement is None
    assert views[keys[1]].phase == "Running" and views[keys[1]].placement.nodes == ("n00000",)
    assert views[keys[2]].phase == "Succeeded"
    snap = snapshot(fleet(8), pool(), views)
    assert set(snap.jobs) == set(keys) and len(snap.nodes) == 8


def test_measure_runs_the_four_rounds_on_a_tiny_contended_fleet():
    row = measure(4, 60, TRACE)  # 32 GPUs for 60 gangs: some wait
    assert row["nodes"] == 4 and row["jobs"] == 60 and row["gpus"] == 32
    for rnd in ROUNDS:
        assert row[rnd]["cpu_s"] >= 0 and row[rnd]["wall_s"] >= 0
    assert 0 < row["cold"]["admitted"] < 60
    assert row["cold"]["admitted"] + row["cold"]["waiting"] == 60
    assert row["steady"]["admitted"] == 0  # nothing changed: nothing new fits


def test_late_split_takes_an_even_share_and_outranks_every_trace_priority():
    batch = gangs(TRACE, 100)
    assert late_split(batch, 0.0) == (batch, [])  # the default: the queue as it was
    early, late = late_split(batch, 0.1)
    assert len(late) == 10 and len(early) == 90
    assert {g.name for g in early} | {g.name.removesuffix("-late") for g in late} == {g.name for g in batch}
    assert all(g.name.endswith("-late") for g in late)  # a uid of its own: a spec of its own
    assert len({g.namespace for g in late}) == 8  # every 10th of 16 teams: spread, not one namespace
    assert all(g.priority == LATE_PRIORITY > max(b.priority for b in batch) for g in late)
    assert min(g.created for g in late) > max(g.created for g in early)


def test_preemptible_rounds_choose_victims_and_the_default_does_not():
    row = measure(4, 60, TRACE, late_share=0.2)  # 12 late gangs of priority 30 against a full pool
    assert row["late"] == 12
    assert row["cold"]["admitted"] + row["cold"]["waiting"] == 48  # the late ones not yet submitted
    assert row["cold"]["preempting"] == 0
    for rnd in ("written", "release"):
        assert row[rnd]["preempting"] > 0 and row[rnd]["victims"] >= row[rnd]["preempting"]
    plain = measure(4, 60, TRACE)
    assert plain["late"] == 0 and all(plain[rnd]["victims"] == plain[rnd]["preempting"] == 0 for rnd in ROUNDS)


def test_report_arithmetic():
    assert report.exponent(1, 1, 10, 10) == pytest.approx(1.0)
    assert report.exponent(1, 1, 10, 100) == pytest.approx(2.0)
    assert math.isnan(report.exponent(1, 0, 10, 1))
    row = {"cold": {"cpu_s": 0.5, "admitted": 100}}
    assert report.per_placed_ms(row) == pytest.approx(5.0)
    assert math.isnan(report.per_placed_ms({"cold": {"cpu_s": 1.0, "admitted": 0}}))


def test_report_prints_and_skips_the_plot_cleanly(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(report, "pyplot", lambda: None)  # matplotlib's import takes seconds
    rows = [measure(2, 10, TRACE), measure(4, 10, TRACE)]
    report.print_rows(rows, rows[0])
    report.print_growth(rows, "nodes", "jobs")
    report.print_memory({"jobs": 10, "nodes": 2, "rss_start_mib": 40.0, "rss_mib": 41.0, "rss_peak_mib": 42.0},
                        {"jobs": 10, "heap_held_mib": 1.0, "heap_peak_mib": 2.0})
    line = report.plot(rows, tmp_path / "p.png")
    out = capsys.readouterr().out
    assert "cold round CPU ms per placed job" in out and "target <= 1024 MiB: met" in out
    assert line == f"  plot: {report.NO_MATPLOTLIB}" and not (tmp_path / "p.png").exists()


def test_sizes_flag():
    assert parse_sizes("1024x1000, 5000X50000") == [(1024, 1000), (5000, 50000)]
    for bad in ("1024", "x10", "10x0", "ax1"):
        with pytest.raises(ValueError):
            parse_sizes(bad)
    args = parse_args(["--sizes", "8x10,16x10", "--memory-jobs", "0"])
    assert args.size_list == [(8, 10), (16, 10)] and args.memory_jobs == 0
    with pytest.raises(SystemExit):
        parse_args(["--sizes", "8"])
    assert parse_args([]).preemptible == 0.0 and parse_args(["--preemptible", "0.1"]).preemptible == 0.1
    for bad in ("-0.1", "1"):
        with pytest.raises(SystemExit):
            parse_args(["--preemptible", bad])


def test_proc_status_reads_a_kib_field():
    assert proc_status_kib("NoSuchField") == 0
    assert proc_status_kib("VmRSS") >= 0


def test_the_burst_admits_the_same_gangs_to_the_same_nodes_every_way(capsys):
    """The burst replay (e2e.bench.scale.burst): carrying the pool view and the placement index
    from round to round changes no admission; a crowded fleet, so later rounds wait and place."""
    from e2e.bench.scale.burst import WAYS, burst_rounds, main

    results = [burst_rounds(16, 120, 15, way) for way in WAYS]
    assert all(len(cpu) == 8 for cpu, _ in results)
    assert results[0][1] and 0 < len(results[0][1]) < 120  # some wait: the fleet is full
    assert results[0][1] == results[1][1] == results[2][1]
    assert main(["--nodes", "48", "--jobs", "60", "--per-round", "20"]) == 0
    assert "same admissions" in capsys.readouterr().out


def test_restart_probe_reads_admission_from_the_api_servers_timestamps():
    from e2e.bench.scale.restart import admitted_after

    def tj(*conds):
        return {"metadata": {"creationTimestamp": "2026-12-07T20:44:28Z"}, "status": {"conditions": list(conds)}}

    assert admitted_after(tj({"type": "Admitted", "status": "True", "lastTransitionTime": "2026-12-07T20:44:51Z"})) == 23
    assert admitted_after(tj({"type": "Admitted", "status": "False", "lastTransitionTime": "2026-12-07T20:44:30Z"})) is None
    assert admitted_after({"metadata": {"creationTimestamp": "2026-12-07T20:44:28Z"}}) is None
