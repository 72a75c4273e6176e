"""kubeforge.cli: the event loop `kubeforge run` hands kopf (issue 27: on uvloop the workers' status
endpoint holds no 256 KiB buffer per kept TLS connection, about 250 MiB less with 1,000 reporting
jobs; the same CPU as asyncio's, e2e/README-reporting-bench.md)."""

from __future__ import annotations

import asyncio
import sys

import click
import kopf
import pytest
import uvloop  # a dependency of the operator (pyproject.toml): its absence is a failure here
from click.testing import CliRunner

from kubeforge import cli


def test_auto_and_uvloop_give_uvloops_loop_closed_afterwards():
    for choice in ("auto", "uvloop"):
        with cli.operator_loop(choice) as loop:
            assert isinstance(loop, uvloop.Loop)
            assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
        assert loop.is_closed()


def test_asyncio_gives_none_so_kopf_runs_asyncio_run():
    with cli.operator_loop("asyncio") as loop:
        assert loop is None


def test_without_uvloop_auto_falls_back_and_uvloop_is_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    with cli.operator_loop("auto") as loop:
        assert loop is None
    with pytest.raises(click.UsageError, match="uvloop is not installed"):
        with cli.operator_loop("uvloop"):
            pass


@pytest.mark.parametrize("env, flag, uvloops", [
    (None, (), True),                                    # the default: uvloop, it is installed
    ("asyncio", (), False),                              # KUBEFORGE_EVENT_LOOP=asyncio turns it off
    ("asyncio", ("--event-loop", "uvloop"), True),       # the flag wins over the environment
    (None, ("--event-loop", "asyncio"), False),
])
def test_run_hands_kopf_the_chosen_loop(monkeypatch, env, flag, uvloops):
    seen = {}

    def fake_run(*, loop=None, **kwargs):
        seen["loop"] = loop
        seen["open"] = loop is not None and not loop.is_closed()

    monkeypatch.setattr(kopf, "run", fake_run)
    monkeypatch.setattr(kopf, "configure", lambda **kw: None)  # leave the test process's logging alone
    monkeypatch.setattr(cli, "_without_sync_client", lambda: None)  # leave sys.modules alone
    if env is None:
        monkeypatch.delenv("KUBEFORGE_EVENT_LOOP", raising=False)
    else:
        monkeypatch.setenv("KUBEFORGE_EVENT_LOOP", env)
    result = CliRunner().invoke(cli.main, ["run", "--metrics-port", "0", "--status-address", "", *flag])
    assert result.exit_code == 0, result.output
    if uvloops:
        assert isinstance(seen["loop"], uvloop.Loop) and seen["open"]
        assert seen["loop"].is_closed()
    else:
        assert seen["loop"] is None


def test_an_unknown_loop_is_refused():
    result = CliRunner().invoke(cli.main, ["run", "--event-loop", "trio"])
    assert result.exit_code == 2 and "trio" in result.output
