"""A cluster's ``down`` stops the kubeforge processes a killed test run left aimed at it.

Pure (no cluster): the "strays" are sleeping Python processes whose command line reads like
``python -m kubeforge...`` and whose environment (or ``--kubeconfig``) names a kubeconfig.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from kubeforge.sim import kubeforge_processes, stop_pids
from kubeforge.sim.cluster import Cluster

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc (Linux)")

SLEEP = "import signal, time\nif 'ignore' in __import__('sys').argv: signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(120)"


def spawn(*argv: str, kubeconfig: str | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    proc = subprocess.Popen([sys.executable, "-c", SLEEP, *argv], env=env, start_new_session=True)
    time.sleep(0.3)  # the child's /proc entries read as its own command line once it has exec'd
    return proc


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(5)


def test_found_by_environment_or_argument_and_only_kubeforge_ones(procs, tmp_path):
    kc = str(tmp_path / "kubeconfig")
    by_env = spawn("-m", "kubeforge", "run", kubeconfig=kc)
    by_arg = spawn("-m", "kubeforge.sim.provisioner", "--kubeconfig", kc)
    other_cluster = spawn("-m", "kubeforge", "run", kubeconfig=str(tmp_path / "other"))
    not_kubeforge = spawn("-m", "something.else", kubeconfig=kc)
    procs += [by_env, by_arg, other_cluster, not_kubeforge]
    assert sorted(kubeforge_processes(kc)) == sorted([by_env.pid, by_arg.pid])


def test_stop_pids_kills_one_that_ignores_sigterm(procs):
    polite, stubborn = spawn(), spawn("ignore")
    procs += [polite, stubborn]
    t0 = time.monotonic()
    stop_pids([polite.pid, stubborn.pid, 999_999_999], grace=1.0)  # a pid that never existed is fine
    assert polite.wait(5) == -signal.SIGTERM
    assert stubborn.wait(5) == -signal.SIGKILL
    assert time.monotonic() - t0 < 5


def test_down_stops_an_operator_left_from_a_killed_run(procs, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBEFORGE_HOME", str(tmp_path))
    c = Cluster("stray-test")  # never created: down() only cleans up
    stray = spawn("-m", "kubeforge", "run", kubeconfig=c.kubeconfig)
    bystander = spawn("-m", "kubeforge", "run", kubeconfig=Cluster("another").kubeconfig)
    procs += [stray, bystander]
    lines: list[str] = []
    c.down(log=lines.append)
    assert stray.wait(10) == -signal.SIGTERM
    assert bystander.poll() is None
    assert lines and str(stray.pid) in lines[0]
