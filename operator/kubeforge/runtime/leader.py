"""Leader election on a ``coordination.k8s.io/v1`` Lease.

kubernetes_asyncio's ``LeaderElection`` with a ``LeaseLock`` and client-go's defaults: 15 s
lease, 10 s renew deadline, 2 s retry. Every replica of the operator keeps its watches and
indexes warm; only the leader admits, creates, scales and writes status (its work queues,
admission round and pool status loop wait on :attr:`Runtime.leading`). A leader that cannot
renew within the deadline stops acting and exits, as controller-runtime does (``leader
election lost``): its Deployment restarts it as a follower with a fresh memory. A follower
takes over once the lease has not been renewed for its whole duration.

On taking over, the new leader reads every TrainingJob once (one LIST, not per object): a
placement the old leader wrote just before it died may not have reached this process's watch
yet, and admission must never act on a ledger that lacks it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from kubernetes_asyncio.leaderelection.electionconfig import Config
from kubernetes_asyncio.leaderelection.leaderelection import LeaderElection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from kubeforge import GROUP, VERSION, metrics
from kubeforge.runtime.state import Runtime

log = logging.getLogger("kubeforge.leader")

LEASE_DURATION = 15  # seconds; whole numbers: the Lease stores leaseDurationSeconds as an integer
RENEW_DEADLINE = 10
RETRY_PERIOD = 2


def default_identity() -> str:
    """``<hostname>_<pid>``: the pod name in a cluster, unique per process."""
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}_{os.getpid()}"


async def catch_up(rt: Runtime) -> int:
    """One consistent LIST of TrainingJobs, folded into the status overlay so the first
    admission round sees every placement the previous leader wrote. Returns the count."""
    listing = await rt.client.request("GET", f"/apis/{GROUP}/{VERSION}/trainingjobs", read=True, resource="trainingjobs")
    items = (listing or {}).get("items") or []
    for obj in items:
        md = obj.get("metadata") or {}
        rt.cache.remember((md.get("namespace"), md.get("name")), obj)
    return len(items)


async def lead(rt: Runtime, stop: asyncio.Event | None = None) -> None:
    """Take part in the election for the life of the process; sets ``rt.leading`` while this
    process leads. Without leader election the process leads at once."""
    if not rt.options.leader_election:
        rt.leading.set()
        metrics.LEADER.set(1)
        return
    identity = rt.options.identity or default_identity()
    lock = LeaseLock(rt.options.lease_name, rt.options.lease_namespace, identity, rt.client.api)

    async def started() -> None:
        await rt.ready.wait()
        n = await catch_up(rt)
        log.info("%s is the leader (lease %s/%s); read %d TrainingJobs", identity,
                 rt.options.lease_namespace, rt.options.lease_name, n)
        metrics.LEADER.set(1)
        rt.leading.set()

    async def stopped() -> None:
        rt.leading.clear()
        metrics.LEADER.set(0)
        log.error("%s lost the lease %s/%s: exiting so a fresh process rejoins as a follower",
                  identity, rt.options.lease_namespace, rt.options.lease_name)
        if stop is not None:
            stop.set()

    config = Config(lock, LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD, started, stopped)
    log.info("%s waits for the lease %s/%s", identity, rt.options.lease_namespace, rt.options.lease_name)
    try:
        await LeaderElection(config).run()
    except asyncio.CancelledError:
        raise
    except Exception:  # never act without a lease: stop, and let the Deployment restart us
        log.exception("%s: leader election failed; exiting", identity)
        rt.leading.clear()
        metrics.LEADER.set(0)
        if stop is not None:
            stop.set()
