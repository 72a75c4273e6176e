"""``kubeforge cache-agent``: the process. One :class:`~._agent.CacheAgent` for the node it runs
on (the DaemonSet passes ``spec.nodeName`` as ``NODE_NAME``), synced every ``interval`` seconds
until SIGTERM or SIGINT; a download under way when the signal comes is left to the lock's next
holder (the partial folder is wiped, the copy fetched again)."""

from __future__ import annotations

import logging
import signal
import threading

from ._agent import CacheAgent
from ._kube import KubeCacheApi

log = logging.getLogger("kubeforge.cacheagent")


def serve(node: str, *, kubeconfig: str | None, identity: str, hf_endpoint: str | None, interval: float,
          once: bool = False) -> None:
    """Run the node's agent until a stop signal (or one pass with ``once``).

    Args:
        node: The node's name.
        kubeconfig: A kubeconfig file, or None (in-cluster, else ``$KUBECONFIG``).
        identity: What ``status.agent`` says (the pod's name).
        hf_endpoint: The Hugging Face Hub endpoint, or None.
        interval: Seconds between passes.
        once: One pass, then return.
    """
    agent = CacheAgent(node, KubeCacheApi(kubeconfig), identity=identity, hf_endpoint=hf_endpoint)
    if once:
        agent.sync_once()
        return
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("cache agent for node %s: syncing every %.0fs", node, interval)
    agent.run(stop, interval)
    log.info("stopped")
