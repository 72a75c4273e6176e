"""The reference workload's checkpoint / resume / SIGTERM logic, without torch or a cluster.

``examples/workload/train_ddp.py`` is a script, not a package module: it is imported by path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "workload" / "train_ddp.py"


def _load():
    spec = importlib.util.spec_from_file_location("kubeforge_example_train_ddp", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wl = _load()


def _complete_dir(root: Path, step: int) -> Path:
    d = root / f"step-{step}"
    d.mkdir(parents=True)
    (d / wl.STATE_FILE).write_bytes(b"s%d" % step)
    (d / wl.COMPLETE_MARKER).write_text(str(step))
    return d


@pytest.fixture
def restore_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


# --- latest_checkpoint -------------------------------------------------------------------


def test_latest_checkpoint_missing_or_empty_dir(tmp_path):
    assert wl.latest_checkpoint(tmp_path / "nope") is None
    assert wl.latest_checkpoint(tmp_path) is None


def test_latest_checkpoint_picks_highest_complete_and_ignores_partial(tmp_path):
    _complete_dir(tmp_path, 5)
    _complete_dir(tmp_path, 40)  # numeric, not lexical, order: 40 > 5 but "40" < "5"
    (tmp_path / "step-7").write_bytes(b"a file under its final name is complete")
    (tmp_path / "step-90").mkdir()  # a directory without its COMPLETE marker
    (tmp_path / "step-90" / wl.STATE_FILE).write_bytes(b"half")
    tmp = tmp_path / ".tmp-step-100-123"  # a writer's temp name, even if marked
    tmp.mkdir()
    (tmp / wl.COMPLETE_MARKER).write_text("100")
    for junk in ("step-95.tmp", "step-x", "step-", "stepp-99", "step-96.partial"):
        (tmp_path / junk).write_bytes(b"")

    assert wl.latest_checkpoint(tmp_path) == (40, tmp_path / "step-40")
    assert [s for s, _ in wl.list_checkpoints(tmp_path)] == [5, 7, 40]


# --- save_checkpoint ---------------------------------------------------------------------


def test_save_checkpoint_bytes_and_callable(tmp_path):
    p1 = wl.save_checkpoint(tmp_path / "ck", 1, b"one")
    p2 = wl.save_checkpoint(tmp_path / "ck", 2, lambda path: path.write_bytes(b"two"))
    assert p1 == tmp_path / "ck" / "step-1" and p2 == tmp_path / "ck" / "step-2"
    assert (p1 / wl.STATE_FILE).read_bytes() == b"one"
    assert (p2 / wl.STATE_FILE).read_bytes() == b"two"
    assert (p2 / wl.COMPLETE_MARKER).is_file()
    assert wl.latest_checkpoint(tmp_path / "ck") == (2, p2)


def test_save_checkpoint_prunes_to_keep(tmp_path):
    for step in (10, 20, 30, 40, 50):
        wl.save_checkpoint(tmp_path, step, b"x", keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-30", "step-40", "step-50"]
    wl.save_checkpoint(tmp_path, 60, b"x", keep=1)
    assert [p.name for p in tmp_path.iterdir()] == ["step-60"]
    with pytest.raises(ValueError):
        wl.save_checkpoint(tmp_path, 70, b"x", keep=0)


def test_save_checkpoint_is_invisible_until_complete(tmp_path):
    wl.save_checkpoint(tmp_path, 1, b"old")
    seen = {}

    def writer(path: Path) -> None:
        path.write_bytes(b"new")
        # Mid-write, a reader still sees only the old checkpoint.
        seen["latest"] = wl.latest_checkpoint(tmp_path)
        seen["names"] = sorted(p.name for p in tmp_path.iterdir())

    wl.save_checkpoint(tmp_path, 2, writer)
    assert seen["latest"] == (1, tmp_path / "step-1")
    assert "step-2" not in seen["names"]
    assert any(n.startswith(wl.TMP_PREFIX) for n in seen["names"])
    assert wl.latest_checkpoint(tmp_path) == (2, tmp_path / "step-2")


def test_save_checkpoint_crash_leaves_no_checkpoint_and_next_save_cleans_up(tmp_path):
    wl.save_checkpoint(tmp_path, 1, b"ok")

    def crash(path: Path) -> None:
        path.write_bytes(b"partial")
        raise RuntimeError("killed mid-save")

    with pytest.raises(RuntimeError):
        wl.save_checkpoint(tmp_path, 2, crash)
    assert wl.latest_checkpoint(tmp_path) == (1, tmp_path / "step-1")
    assert any(p.name.startswith(wl.TMP_PREFIX) for p in tmp_path.iterdir())

    wl.save_checkpoint(tmp_path, 3, b"ok")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-1", "step-3"]


def test_save_checkpoint_same_step_again_replaces_it(tmp_path):
    wl.save_checkpoint(tmp_path, 5, b"first")
    p = wl.save_checkpoint(tmp_path, 5, b"second")
    assert (p / wl.STATE_FILE).read_bytes() == b"second"
    assert [x.name for x in tmp_path.iterdir()] == ["step-5"]


# --- report_checkpoint -------------------------------------------------------------------


def test_report_checkpoint_writes_one_json_line_to_env_path(tmp_path, monkeypatch):
    msg = tmp_path / "termination-log"
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(msg))
    now = datetime(2025, 3, 4, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))

    wl.report_checkpoint(10, "/checkpoints/step-10", now)
    line = wl.report_checkpoint(20, Path("/checkpoints/step-20"), now)  # overwrites

    text = msg.read_text()
    assert text == line + "\n" and text.count("\n") == 1
    assert json.loads(text) == {"step": 20, "path": "/checkpoints/step-20", "time": "2025-03-04T05:08:09Z"}
    # The operator's status field accepts it as is.
    from kubeforge.api import LastCheckpoint

    ck = LastCheckpoint.model_validate(json.loads(text))
    assert ck.step == 20 and ck.time == datetime(2025, 3, 4, 5, 8, 9, tzinfo=timezone.utc)


def test_report_checkpoint_default_time_is_utc_now(tmp_path, monkeypatch):
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "m"))
    before = datetime.now(timezone.utc).replace(microsecond=0)
    data = json.loads(wl.report_checkpoint(1, "p"))
    t = datetime.strptime(data["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert before <= t <= datetime.now(timezone.utc)


def test_report_checkpoint_unwritable_path_does_not_raise(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "no" / "such" / "dir" / "log"))
    wl.report_checkpoint(1, "p")
    assert "cannot write termination message" in capsys.readouterr().err


# --- resume ------------------------------------------------------------------------------


def test_checkpoint_dir_from_env():
    assert wl.checkpoint_dir({"KUBEFORGE_CHECKPOINT_DIR": "/ck"}) == Path("/ck")
    assert wl.checkpoint_dir({}) == Path("checkpoints")


def test_resume_point_uses_kubeforge_checkpoint_dir(tmp_path, monkeypatch):
    _complete_dir(tmp_path, 3)
    _complete_dir(tmp_path, 8)
    monkeypatch.setenv("KUBEFORGE_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.delenv("KUBEFORGE_LAST_CHECKPOINT_PATH", raising=False)
    monkeypatch.delenv("KUBEFORGE_LAST_CHECKPOINT_STEP", raising=False)
    assert wl.resume_point() == (8, tmp_path / "step-8")  # default env is os.environ


def test_resume_point_nothing_to_resume(tmp_path):
    assert wl.resume_point({"KUBEFORGE_CHECKPOINT_DIR": str(tmp_path / "empty")}) is None


@pytest.mark.parametrize(
    "reported_step, make_it, expected",
    [
        (6, "missing", 8),  # reported path gone (pruned): the scan wins
        (6, "complete", 8),  # report lags the volume (e.g. SIGKILL before reporting)
        (12, "incomplete", 8),  # reported path is not a complete checkpoint: ignored
        (12, "complete", 12),  # reported elsewhere and newer: used
    ],
)
def test_resume_point_with_operator_report(tmp_path, reported_step, make_it, expected):
    ck = tmp_path / "ck"
    _complete_dir(ck, 8)
    other = tmp_path / "elsewhere"
    if make_it == "complete":
        _complete_dir(other, reported_step)
    elif make_it == "incomplete":
        (other / f"step-{reported_step}").mkdir(parents=True)
    reported = other / f"step-{reported_step}"
    env = {
        "KUBEFORGE_CHECKPOINT_DIR": str(ck),
        "KUBEFORGE_LAST_CHECKPOINT_PATH": str(reported),
        "KUBEFORGE_LAST_CHECKPOINT_STEP": str(reported_step),
    }
    step, _ = wl.resume_point(env)
    assert step == expected


# --- run_loop ----------------------------------------------------------------------------


class Recorder:
    def __init__(self, stop_after=None):
        self.steps, self.saves, self.stop_after = [], [], stop_after

    def step(self, s):
        self.steps.append(s)

    def save(self, s):
        self.saves.append(s)

    def should_stop(self):
        return self.stop_after is not None and len(self.steps) >= self.stop_after


def test_run_loop_saves_periodically_and_at_the_end():
    r = Recorder()
    assert wl.run_loop(0, 25, r.step, r.save, r.should_stop, checkpoint_every=10) == (25, False)
    assert r.steps == list(range(25)) and r.saves == [10, 20, 25]


def test_run_loop_resumes_from_start_step():
    r = Recorder()
    assert wl.run_loop(20, 30, r.step, r.save, r.should_stop, checkpoint_every=10) == (30, False)
    assert r.steps == list(range(20, 30)) and r.saves == [30]
    done = Recorder()
    assert wl.run_loop(30, 30, done.step, done.save, done.should_stop) == (30, False)
    assert done.steps == [] and done.saves == []


def test_run_loop_stop_checkpoints_at_next_boundary():
    r = Recorder(stop_after=3)
    assert wl.run_loop(100, 1000, r.step, r.save, r.should_stop, checkpoint_every=50) == (103, True)
    assert r.steps == [100, 101, 102] and r.saves == [103]


def test_run_loop_stop_right_after_a_save_or_at_start_does_not_save_twice():
    r = Recorder(stop_after=10)
    assert wl.run_loop(0, 100, r.step, r.save, r.should_stop, checkpoint_every=10) == (10, True)
    assert r.saves == [10]
    r = Recorder(stop_after=0)
    assert wl.run_loop(40, 100, r.step, r.save, r.should_stop) == (40, True)
    assert r.steps == [] and r.saves == []


def test_exit_code_choice():
    assert wl.exit_code(False) == 0
    assert wl.exit_code(True) == wl.EXIT_PREEMPTED == 128 + signal.SIGTERM


# --- SIGTERM -----------------------------------------------------------------------------


def test_sigterm_in_process_sets_flag_and_loop_stops(tmp_path, monkeypatch, restore_signals):
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "msg"))
    stop = wl.GracefulStop().install()
    done = []

    def step_fn(step):
        done.append(step)
        if step == 2:
            signal.raise_signal(signal.SIGTERM)  # arrives mid-step; the step still finishes

    def save_fn(step):
        wl.report_checkpoint(step, wl.save_checkpoint(tmp_path / "ck", step, b"%d" % step))

    result = wl.run_loop(0, 100, step_fn, save_fn, lambda: stop.requested, checkpoint_every=50)
    assert result == (3, True) and done == [0, 1, 2]
    assert wl.latest_checkpoint(tmp_path / "ck") == (3, tmp_path / "ck" / "step-3")
    assert json.loads((tmp_path / "msg").read_text())["step"] == 3


CHILD = textwrap.dedent(
    """
    import importlib.util, sys, time
    spec = importlib.util.spec_from_file_location("wl", sys.argv[1])
    wl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wl)
    assert "torch" not in sys.modules
    stop = wl.GracefulStop().install()
    ckdir = wl.checkpoint_dir()
    found = wl.resume_point()
    start = found[0] if found else 0

    def step_fn(step):
        if step == start + 3:
            print("READY", step, flush=True)
            deadline = time.monotonic() + 20  # bounded: the parent signals right away
            while not stop.requested and time.monotonic() < deadline:
                time.sleep(0.01)

    def save_fn(step):
        path = wl.save_checkpoint(ckdir, step, b"state-%d" % step)
        wl.report_checkpoint(step, path)

    step, stopped = wl.run_loop(start, 1000, step_fn, save_fn, lambda: stop.requested, 100)
    print("EXIT", step, stopped, flush=True)
    sys.exit(wl.exit_code(stopped))
    """
)


def _run_child_and_terminate(env):
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(SCRIPT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        ready = proc.stdout.readline()  # returns at READY, or "" if the child died
        assert ready.startswith("READY"), (ready, proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    return ready, out, err, proc.returncode


def test_sigterm_subprocess_checkpoints_reports_and_exits_143(tmp_path):
    ck, msg = tmp_path / "ck", tmp_path / "termination-log"
    env = {**os.environ, "KUBEFORGE_CHECKPOINT_DIR": str(ck), "TERMINATION_MESSAGE_PATH": str(msg)}
    env.pop("KUBEFORGE_LAST_CHECKPOINT_PATH", None)
    env.pop("KUBEFORGE_LAST_CHECKPOINT_STEP", None)

    ready, out, err, rc = _run_child_and_terminate(env)
    assert ready.split() == ["READY", "3"]
    assert rc == 143, (out, err)
    assert "EXIT 4 True" in out
    assert wl.latest_checkpoint(ck) == (4, ck / "step-4")
    assert (ck / "step-4" / wl.STATE_FILE).read_bytes() == b"state-4"
    report = json.loads(msg.read_text())
    assert (report["step"], report["path"]) == (4, str(ck / "step-4")) and report["time"].endswith("Z")

    # The restart (attempt 1) resumes from step 4 and, stopped again, checkpoints at 8.
    ready, out, err, rc = _run_child_and_terminate({**env, "KUBEFORGE_RESTART_ATTEMPT": "1"})
    assert ready.split() == ["READY", "7"]
    assert rc == 143, (out, err)
    assert wl.latest_checkpoint(ck) == (8, ck / "step-8")
    assert json.loads(msg.read_text())["step"] == 8


def test_script_imports_and_parses_args_without_torch():
    code = (
        "import importlib.util, sys;"
        f"spec = importlib.util.spec_from_file_location('wl', {str(SCRIPT)!r});"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m);"
        "a = m.parse_args(['--steps', '7', '--checkpoint-every', '2', '--lr', '0.5']);"
        "assert (a.steps, a.checkpoint_every, a.lr, a.keep) == (7, 2, 0.5, 3), a;"
        "assert 'torch' not in sys.modules; print('ok')"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr
    res = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "--checkpoint-every" in res.stdout, res.stderr
