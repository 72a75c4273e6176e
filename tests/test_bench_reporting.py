"""The reporting bench's pure parts (e2e/bench/reporting.py): its defaults are the target's and
the chart's, and a window counts only the reports sent inside it."""

from __future__ import annotations

from kubeforge.runtime.state import Options

from e2e.bench import reporting


def test_defaults_are_the_targets_and_the_operators():
    a = reporting.parse_args([])
    assert (a.jobs, a.interval, a.new_connections) == (1000, 10.0, False)  # 1,000 jobs every 10 s, kept connections
    opts = Options()
    assert (a.progress_write_seconds, a.progress_writes_per_second) == (
        opts.progress_write_seconds, opts.progress_writes_per_second)


def test_a_window_counts_the_reports_sent_inside_it():
    load = reporting.Load([], "", 10.0)
    load.samples = [(1.0, 200, 0.1), (5.0, 200, 0.2), (6.0, 429, 0.05), (20.0, 200, 0.3)]
    codes, trips = load.window(2.0, 10.0)
    assert codes == {200: 1, 429: 1} and trips == [0.2, 0.05]


def test_probe_jobs_are_one_gpu_without_topology():
    job = reporting.training_job("p-0", "ns")
    assert job["spec"]["replicas"] == 1 and job["spec"]["gpusPerReplica"] == 1
    assert job["spec"]["topology"] == {"mode": "None"} and job["spec"]["checkpoint"]["existingClaimName"]
