"""``python -m e2e.bench.scale.pool_pass [NODES JOBS WAITING]``: the GPUPool status loop's CPU
per pass (:func:`kubeforge.runtime.pools.refresh_pools`), a pass of its own against a pass after
an admission round (which takes that round's snapshot, ledgers and views), alternated in one
process, on the tests' fake API server with the real index handlers and the real admission
round: ``NODES`` 8-GPU nodes (default 1,024), ``JOBS`` running 2 x 4-GPU gangs (800) and
``WAITING`` gangs that do not fit (20), so every round has something waiting, as in a busy
cluster. It measures; it asserts nothing.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))

from fakekube import settle, small_cluster  # noqa: E402
from records import job_body, submitted  # noqa: E402

from kubeforge.runtime.admission import admission_round  # noqa: E402
from kubeforge.runtime.pools import PoolPasses, refresh_pools  # noqa: E402


async def measure(n: int, j: int, w: int) -> None:
    """Print the CPU of a pass each way, twice, alternated (ms)."""
    kube = await small_cluster(n)
    for i in range(j):
        await kube.client_create("TrainingJob", submitted(job_body(f"j{i}", gpus=4, replicas=2)))
    await settle(kube, rounds=60)
    for i in range(w):  # waiting: do not fit
        await kube.client_create("TrainingJob", submitted(job_body(f"w{i}", gpus=8, replicas=n)))
    await admission_round(kube.rt, kube.now)
    print(f"{n} nodes, {len(kube.items('Pod'))} pods, {w} gangs waiting")
    passes = PoolPasses()
    await refresh_pools(kube.rt, passes, kube.now)
    for label, round_between in (("own", False), ("after a round", True)) * 2:
        pass_cpu = 0.0
        for _ in range(20):
            if round_between:
                await admission_round(kube.rt, kube.now)
            else:
                passes.rounds = kube.rt.cache.last_round().count
            t = time.process_time()
            await refresh_pools(kube.rt, passes, kube.now)
            pass_cpu += time.process_time() - t
        print(f"{label}: {pass_cpu / 20 * 1000:.1f} ms a pass")


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``[NODES JOBS WAITING]``."""
    args = [int(a) for a in (argv if argv is not None else sys.argv[1:])] or [1024, 800, 20]
    asyncio.run(measure(*args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
