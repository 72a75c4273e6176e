"""The figures of the bench from the groups' times (pure): percentiles per system, the phases of
kubeforge's start, the ratio against the target, and the JSON that ``python -m
e2e.bench.autoscaling --lws-live FILE`` reads back."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from e2e.bench.lib.jsonfile import dump_figures
from e2e.bench.lib.stats import percentile
from e2e.bench.lws_live.track import GroupTimes

__all__ = ["PHASES", "TARGET", "Figures", "SystemFigures", "dump", "figures", "load_figures", "system_figures", "verdict"]

TARGET = 1.5
"""Issue 28: kubeforge's multi-node group create -> Ready p50 at most 1.5x the real LWS's."""

PHASES = ("admitted", "created", "bound", "ready")
"""The times taken from the create call, in order (``admitted``: kubeforge only)."""


@dataclass
class SystemFigures:
    """One system's groups.

    Attributes:
        groups: groups measured (all rounds).
        timed_out: groups never Ready within the round's timeout (left out of the percentiles).
        p50, p95: create -> every pod of the group Ready, s (nearest rank; NaN: none).
        phases: per phase of :data:`PHASES`, ``(p50, p95)`` of create -> that phase, s (phases
            never seen are left out).
        samples: create -> Ready of every Ready group, s, in the order measured.
    """

    groups: int = 0
    timed_out: int = 0
    p50: float = float("nan")
    p95: float = float("nan")
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)
    samples: list[float] = field(default_factory=list)


def system_figures(groups: list[GroupTimes]) -> SystemFigures:
    """Percentiles of create -> Ready and of every phase over ``groups``."""
    ready = [t for g in groups if (t := g.since_create("ready")) is not None]
    out = SystemFigures(len(groups), len(groups) - len(ready), percentile(ready, 50), percentile(ready, 95),
                        samples=[round(x, 3) for x in ready])
    for ph in PHASES:
        xs = [t for g in groups if (t := g.since_create(ph)) is not None]
        if xs:
            out.phases[ph] = (percentile(xs, 50), percentile(xs, 95))
    return out


def verdict(kubeforge_p50: float, lws_p50: float) -> tuple[float | None, bool | None]:
    """``(kubeforge / LWS, met)`` for the p50 target; ``(None, None)`` when either is missing."""
    if not (kubeforge_p50 > 0 and lws_p50 > 0):  # NaN compares False
        return None, None
    x = kubeforge_p50 / lws_p50
    return x, x <= TARGET


@dataclass
class Figures:
    """The whole run, as written to ``--json``.

    Attributes:
        kubeforge, lws: each system's figures.
        ratio: kubeforge's p50 over LWS's (None: one of them has none).
        met: ``ratio <= TARGET`` (None: no ratio).
        rounds, replicas, size, gpus: the run's shape.
        load: the machine's 1-minute load average at the start and at the end.
        when: UTC time of the run, ISO 8601.
    """

    kubeforge: SystemFigures
    lws: SystemFigures
    ratio: float | None
    met: bool | None
    rounds: int
    replicas: int
    size: int
    gpus: int
    load: tuple[float, float]
    when: str


def figures(groups: list[GroupTimes], rounds: int, replicas: int, size: int, gpus: int,
            load: tuple[float, float], when: str) -> Figures:
    """Both systems' figures and the verdict from every group measured."""
    kf = system_figures([g for g in groups if g.system == "kubeforge"])
    lw = system_figures([g for g in groups if g.system == "lws"])
    r, ok = verdict(kf.p50, lw.p50)
    return Figures(kf, lw, r, ok, rounds, replicas, size, gpus, load, when)


def dump(f: Figures, path: Path) -> None:
    """Write ``f`` as JSON to ``path`` (NaN written as null)."""
    dump_figures(f, path)


def load_figures(path: Path) -> tuple[float | None, float | None]:
    """``(kubeforge p50, LWS p50)`` in s from a ``--json`` file (None where it has none).

    Raises:
        OSError: the file cannot be read.
        ValueError: not JSON of this bench (``json.JSONDecodeError`` is one).
    """
    data = json.loads(Path(path).read_text())
    try:
        kf, lw = data["kubeforge"]["p50"], data["lws"]["p50"]
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}: not the JSON of python -m e2e.bench.lws_live --json (no {e})") from e
    return (float(kf) if kf is not None else None), (float(lw) if lw is not None else None)
