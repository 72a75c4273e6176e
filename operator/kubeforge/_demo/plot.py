"""The demo's picture (matplotlib, no display: the Agg canvas): two panels over the demo's time.

1. GPUs allocated per NVLink domain, as the pool's status said at each sample;
2. the chat service's replicas (desired and Ready, status) against its queue (waiting requests
   in the model-server simulator, and the value the operator last read from Prometheus), the
   burst shaded.

The PNG carries its panels' titles in a text chunk (``Description``), so a reader can tell
what it holds without decoding the image.
"""

from __future__ import annotations

from pathlib import Path

from .timeline import Timeline

__all__ = ["PANELS", "matplotlib_missing", "plot"]

PANELS = ("GPUs allocated per NVLink domain", "llama-chat: replicas and queue")


def matplotlib_missing() -> str | None:
    """None when matplotlib imports, else how to install it."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install 'kubeforge[demo]', or make setup)"
    return None


def plot(tl: Timeline, path: Path, service: str = "llama-chat", credit: str = "") -> int:
    """Draw ``tl`` into the PNG ``path`` (its folder is made); returns the number of panels (axes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with tl.lock:
        samples = list(tl.samples)
        burst = tl.burst
    fig = Figure(figsize=(11, 7.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    ts = [s.t for s in samples]
    names = sorted({d for s in samples for d, n in s.domains.items() if n})
    idle = sorted({d for s in samples for d in s.domains} - set(names))
    if names:  # stacked: each domain's band, the pool's total on top (lines of equal height hide each other)
        top.stackplot(ts, *[[s.domains.get(d, 0) for s in samples] for d in names], labels=names, step="post",
                      alpha=0.85)
        total = max(sum(s.domains.values()) for s in samples)
        top.set_ylim(0, 1.35 * max(total, 1))
        top.legend(ncol=4, fontsize=8, loc="upper left")
    top.set_title(f"{PANELS[0]} ({tl.level}, stacked; from the pool's status)"
                  + (f"; {len(idle)} domains stayed at 0" if idle else ""))
    top.set_ylabel("GPUs allocated")
    top.grid(alpha=0.3)

    rep = [(s.t, s.desired) for s in samples if s.desired is not None]
    bottom.step([t for t, _ in rep], [d for _, d in rep], where="post", color="tab:blue", label="desired replicas")
    bottom.step(ts, [s.ready for s in samples], where="post", color="tab:green", linestyle="--", label="Ready replicas")
    bottom.set_ylabel("replicas")
    bottom.set_xlabel("seconds since the operator started")
    bottom.set_title(f"{service}: replicas and queue" + (f" ({credit})" if credit else ""))
    bottom.grid(alpha=0.3)
    q = bottom.twinx()
    q.plot(ts, [s.waiting for s in samples], color="tab:red", alpha=0.7, label="waiting requests (simulator)")
    met = [(s.t, s.metric) for s in samples if s.metric is not None]
    q.plot([t for t, _ in met], [m for _, m in met], color="tab:orange", linestyle=":",
           label="queue read from Prometheus")
    q.set_ylabel("requests waiting")
    if burst:
        for ax in (top, bottom):
            ax.axvspan(burst[0], burst[1], color="grey", alpha=0.12, label="_burst")
        bottom.text(burst[0], 1.0, " burst", transform=bottom.get_xaxis_transform(), va="top", fontsize=8)
    lines = bottom.get_legend_handles_labels()
    more = q.get_legend_handles_labels()
    bottom.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Title": "kubeforge demo", "Description": " | ".join(PANELS)})
    # panels = distinct grid cells (the queue's twin axis shares the bottom one)
    return len({a.get_subplotspec().get_geometry() for a in fig.axes if a.get_subplotspec() is not None})
