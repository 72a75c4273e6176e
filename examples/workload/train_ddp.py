"""Reference PyTorch DDP workload for a kubeforge TrainingJob, launched by ``torchrun``.

What it expects from the operator (all set on every worker pod):

- ``PET_*``, ``WORLD_SIZE``, ``RANK``, ``MASTER_*``: read by torchrun / ``init_process_group``.
- ``KUBEFORGE_CHECKPOINT_DIR``: the checkpoint volume, shared by every restart of the job.
- ``KUBEFORGE_LAST_CHECKPOINT_PATH`` / ``_STEP``: the last checkpoint reported (may be absent).
- ``KUBEFORGE_STATUS_URL`` / ``_TOKEN`` / ``_CA_CERT``: where to report progress live
  (:mod:`kubeforge.workload`, docs/workload-reporting.md); absent: nothing is reported live.

What it gives back: checkpoints ``<dir>/step-<N>/state.pt`` (complete once renamed from a
``.tmp-`` name and holding a ``COMPLETE`` marker), and the newest one as one JSON line
``{"step", "path", "time"}`` in the termination message, which the operator stores in
``status.lastCheckpoint``. Global rank 0 also reports live (``kubeforge.workload.report``): the
step, the total and the loss at most every ``--report-every`` seconds, and each checkpoint as
soon as every rank is past it, into ``status.progress`` and ``status.lastCheckpoint``. On SIGTERM
(preemption) it checkpoints at the next step boundary and exits 143 (128 + SIGTERM): never 0,
so an interrupted run cannot pass for a finished one.

The top half is pure Python (no torch import) so the checkpoint logic can be tested alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, List, Mapping, Optional, Tuple, Union

EXIT_PREEMPTED = 143  # 128 + SIGTERM: the shell / Kubernetes convention for "terminated".
STATE_FILE = "state.pt"
COMPLETE_MARKER = "COMPLETE"
TMP_PREFIX = ".tmp-"
_STEP_RE = re.compile(r"^step-(\d+)$")

Checkpoint = Tuple[int, Path]


def checkpoint_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The checkpoint directory: ``$KUBEFORGE_CHECKPOINT_DIR``, else ``./checkpoints``."""
    return Path(env.get("KUBEFORGE_CHECKPOINT_DIR") or "checkpoints")


def _is_complete(path: Path) -> bool:
    """A ``step-<N>`` file is complete by its final name; a directory needs its marker."""
    return path.is_file() or (path.is_dir() and (path / COMPLETE_MARKER).is_file())


def list_checkpoints(directory: Union[str, Path]) -> List[Checkpoint]:
    """Complete checkpoints in ``directory`` as ``(step, path)``, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for entry in directory.iterdir():
        m = _STEP_RE.match(entry.name)  # temp names (".tmp-...") never match
        if m and _is_complete(entry):
            found.append((int(m.group(1)), entry))
    return sorted(found)


def latest_checkpoint(directory: Union[str, Path]) -> Optional[Checkpoint]:
    """The highest-step complete checkpoint in ``directory``, or None."""
    found = list_checkpoints(directory)
    return found[-1] if found else None


def _remove(path: Path) -> None:
    """Remove a checkpoint or temp entry, file or directory, ignoring races."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    """Persist a rename; some network filesystems refuse fsync on a directory: skip there."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(
    directory: Union[str, Path],
    step: int,
    state: Union[bytes, Callable[[Path], None]],
    keep: int = 3,
) -> Path:
    """Write ``<directory>/step-<step>/`` atomically and keep only the newest ``keep``.

    The state is written under a ``.tmp-`` name, fsynced, marked ``COMPLETE``, then renamed
    into place, so a reader (or a resumed job) never sees a half-written checkpoint.

    Args:
        directory: The checkpoint directory (created if missing).
        step: The training step the state belongs to.
        state: The bytes to store, or a callable that writes the state to the path it is
            given (e.g. ``lambda p: torch.save(obj, p)``).
        keep: How many complete checkpoints to keep (at least 1).

    Returns:
        The final checkpoint directory.
    """
    if keep < 1:
        raise ValueError("keep must be >= 1")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(TMP_PREFIX + "*"):  # left by a writer killed mid-save
        _remove(stale)
    final = directory / f"step-{step}"
    tmp = directory / f"{TMP_PREFIX}step-{step}-{os.getpid()}"
    tmp.mkdir()
    target = tmp / STATE_FILE
    if callable(state):
        state(target)
    else:
        target.write_bytes(state)
    with open(target, "rb+") as f:
        os.fsync(f.fileno())
    (tmp / COMPLETE_MARKER).write_text(f"{step}\n")
    _fsync_dir(tmp)
    if final.exists():  # same step saved again (e.g. resumed, then stopped at once)
        old = directory / f"{TMP_PREFIX}old-step-{step}-{os.getpid()}"
        os.rename(final, old)
        os.rename(tmp, final)
        _remove(old)
    else:
        os.rename(tmp, final)
    _fsync_dir(directory)
    for _, path in list_checkpoints(directory)[:-keep]:
        _remove(path)
    return final


def report_checkpoint(step: int, path: Union[str, Path], now: Optional[datetime] = None) -> str:
    """Write the checkpoint as one JSON line to the termination message file.

    The file is ``$TERMINATION_MESSAGE_PATH`` (default ``/dev/termination-log``). It is
    truncated and rewritten in place (it is a bind mount, so rename-over is not possible);
    Kubernetes reads it when the container exits. Failure to write is logged, not raised.

    Args:
        step: The checkpoint's training step.
        path: Where the checkpoint is (in the checkpoint volume).
        now: When it was written; default now. Any timezone; written as UTC.

    Returns:
        The line written (without the newline).
    """
    now = now or datetime.now(timezone.utc)
    stamp = now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    line = json.dumps({"step": int(step), "path": str(path), "time": stamp})
    target = os.environ.get("TERMINATION_MESSAGE_PATH", "/dev/termination-log")
    try:
        with open(target, "w") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        print(f"warning: cannot write termination message {target}: {e}", file=sys.stderr)
    return line


def resume_point(env: Mapping[str, str] = os.environ) -> Optional[Checkpoint]:
    """Where to resume: the newest complete checkpoint in the volume or reported by the operator.

    The volume scan is the source of truth (the report can lag, e.g. after a SIGKILL);
    ``KUBEFORGE_LAST_CHECKPOINT_PATH`` is used too when it exists and is complete.
    """
    best = latest_checkpoint(checkpoint_dir(env))
    path, step = env.get("KUBEFORGE_LAST_CHECKPOINT_PATH"), env.get("KUBEFORGE_LAST_CHECKPOINT_STEP")
    if path and step and step.isdigit() and _is_complete(Path(path)):
        if best is None or int(step) > best[0]:
            best = (int(step), Path(path))
    return best


class GracefulStop:
    """A flag set by SIGTERM/SIGINT; the loop checks it at step boundaries."""

    def __init__(self) -> None:
        self.requested = False

    def install(self, signals=(signal.SIGTERM, signal.SIGINT)) -> "GracefulStop":
        for s in signals:
            signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.requested = True  # only set a flag: never checkpoint from inside a handler


def run_loop(
    start_step: int,
    steps: int,
    step_fn: Callable[[int], None],
    save_fn: Callable[[int], object],
    should_stop: Callable[[], bool],
    checkpoint_every: int = 100,
) -> Tuple[int, bool]:
    """Run steps ``start_step .. steps-1``, checkpointing periodically and on stop.

    ``should_stop`` is called once per step boundary on every rank (in DDP it is a collective,
    so all ranks stop at the same step). ``save_fn(step)`` is also called on every rank.

    Args:
        start_step: The step to start from (the resumed checkpoint's, or 0).
        steps: The total number of steps; the loop ends when ``steps`` is reached.
        step_fn: Runs one training step, given its index.
        save_fn: Saves (and reports) a checkpoint of the state after ``step`` steps.
        should_stop: True when a stop was requested (e.g. by SIGTERM).
        checkpoint_every: Save every this many steps, and at the end.

    Returns:
        ``(step reached, stopped early)``.
    """
    step, saved = start_step, start_step
    while step < steps:
        if should_stop():
            if step != saved:
                save_fn(step)
            return step, True
        step_fn(step)
        step += 1
        if step % checkpoint_every == 0 or step == steps:
            save_fn(step)
            saved = step
    return step, False


def exit_code(stopped: bool) -> int:
    """0 when training finished; 143 when stopped by a signal after checkpointing.

    Non-zero on purpose: a pod that exits 0 is ``Succeeded``, and a gang whose pods all
    succeed is a finished job. The operator classifies preemption from the pod (deletion,
    ``DisruptionTarget``, node taints), not from this code.
    """
    return EXIT_PREEMPTED if stopped else 0


def live_reporter(every: float = 10.0):
    """A :class:`kubeforge.workload.Reporter` (standard library only): from the installed
    kubeforge package, else from ``kubeforge_workload.py`` beside this script (copy
    ``operator/kubeforge/workload.py`` there, e.g. into the same ConfigMap), else None (nothing
    is reported live; the termination message still is)."""
    try:
        from kubeforge import workload
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        try:
            import kubeforge_workload as workload  # type: ignore[no-redef]
        except ImportError:
            return None
    return workload.Reporter(min_interval=every)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000, help="total training steps")
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints")
    p.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    p.add_argument("--lr", type=float, default=1e-2, help="learning rate")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--report-every", type=float, default=10.0, help="seconds between live progress reports")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds each step also sleeps (a slower model)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    """Train a toy MLP with DDP; returns the process exit code (0 done, 143 stopped)."""
    args = parse_args(argv)
    stop = GracefulStop().install()  # before rendezvous: a SIGTERM then still counts
    import torch  # lazy: the helpers above must import without torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")  # env:// from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    ckdir = checkpoint_dir()
    live = live_reporter(args.report_every) if rank == 0 else None

    # Rank 0 picks the resume point and tells the others, so every rank loads the same one.
    found = [resume_point() if rank == 0 else None]
    dist.broadcast_object_list(found, src=0)
    start = 0
    if found[0] is not None:
        start, path = found[0]
        state = torch.load(Path(path) / STATE_FILE, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        if local_rank == 0:  # keep the message current even if we stop before saving
            report_checkpoint(start, path)
        if rank == 0:
            print(f"resumed from {path} at step {start}", flush=True)
    ddp = DDP(model, device_ids=[local_rank] if cuda else None)

    def step_fn(step: int) -> None:
        g = torch.Generator().manual_seed(step * world + rank)  # deterministic across resumes
        x = torch.randn(args.batch_size, 32, generator=g).to(device)
        y = x.sum(dim=1, keepdim=True).sin()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if rank == 0 and step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if rank == 0 and live is not None:
            live.report(step=step + 1, total_steps=args.steps, metrics={"loss": loss.item()})

    def save_fn(step: int) -> None:
        path = ckdir / f"step-{step}"
        if rank == 0:  # one writer; the volume is shared
            state = {"step": step, "model": model.state_dict(), "optim": opt.state_dict()}
            path = save_checkpoint(ckdir, step, lambda p: torch.save(state, p), keep=args.keep)
        dist.barrier()  # the checkpoint is complete before anyone reports it
        if local_rank == 0:  # one termination message per container
            report_checkpoint(step, path)
        if rank == 0 and live is not None:  # and live, at once
            live.report(step=step, total_steps=args.steps, checkpoint=(step, str(path)), force=True)

    def should_stop() -> bool:
        flag = torch.tensor([1 if stop.requested else 0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # any rank signalled: all stop here
        return bool(flag.item())

    try:
        step, stopped = run_loop(start, args.steps, step_fn, save_fn, should_stop, args.checkpoint_every)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        print(f"{'stopped' if stopped else 'finished'} at step {step}", flush=True)
        if live is not None:
            live.report(step=step, total_steps=args.steps, force=True)
    return exit_code(stopped)


if __name__ == "__main__":
    sys.exit(main())
