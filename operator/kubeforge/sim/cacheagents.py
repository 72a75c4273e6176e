"""Node cache agents on the local cluster (issue 29): one real :class:`~kubeforge.cacheagent.CacheAgent`
a node, each on a thread of this process, each with a directory of its own for its node's disk.

On a real cluster the chart's DaemonSet runs one agent a GPU node and every node has its own
disk at the pool's ``spec.modelCache.hostPath``. Here kwok's nodes are objects only and every
agent runs on one machine, so :class:`NodeDiskApi` moves each node's ``hostPath`` under
``<root>/<node>``; everything else (the ModelCacheNode spec read through the real API server,
the download with ``huggingface_hub``, the verified copy, the ready marker, the status writes) is
what ships. :class:`LocalAgents` starts and stops them; ``tests/test_model_cache_cluster.py`` and
the demo's model step (``kubeforge demo``) use it, with :class:`kubeforge.sim.hub.HubStandIn` as
the Hugging Face Hub.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterable, Mapping

from kubeforge.cacheagent import CacheAgent, CacheApi, KubeCacheApi

__all__ = ["LocalAgents", "NodeDiskApi"]


class NodeDiskApi:
    """The agent's API (:class:`kubeforge.cacheagent.CacheApi`) with the node's ``hostPath``
    moved under ``root/<node>``: one disk a node although every agent runs on this machine.

    Reads and writes go to the API server unchanged; only the ``spec.hostPath`` of the
    ModelCacheNode handed to the agent is rewritten (the object on the server keeps the pool's).

    Args:
        kubeconfig: Path of the cluster's kubeconfig (a :class:`~kubeforge.cacheagent.KubeCacheApi`
            is opened on it), unless ``api`` is given.
        root: The folder that holds one sub-folder per node.
        api: The API to wrap (tests may hand a fake); default ``KubeCacheApi(kubeconfig)``.
    """

    def __init__(self, kubeconfig: str | None, root: Path, api: CacheApi | None = None) -> None:
        self.api: CacheApi = api if api is not None else KubeCacheApi(kubeconfig)
        self.root = Path(root)

    def disk(self, node: str) -> Path:
        """The folder that stands for ``node``'s disk at the pool's hostPath."""
        return self.root / node

    def get_node_cache(self, name: str) -> dict[str, Any] | None:
        """The ModelCacheNode ``name`` (a dict) with ``spec.hostPath`` set to :meth:`disk`; None
        when there is none."""
        obj = self.api.get_node_cache(name)
        if obj is not None:
            obj.setdefault("spec", {})["hostPath"] = str(self.disk(name))
        return obj

    def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        """The Secret's data, decoded. Raises :class:`kubeforge.cacheagent.SecretMissing`."""
        return self.api.read_secret(namespace, name)

    def patch_status(self, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the ModelCacheNode's ``status`` (unchanged)."""
        self.api.patch_status(name, status)


class LocalAgents:
    """One :class:`~kubeforge.cacheagent.CacheAgent` thread a node, each node's disk a folder
    ``root/<node>`` (:class:`NodeDiskApi`); ``start(nodes)`` then ``stop()``, or ``with``.

    Args:
        kubeconfig: Path of the cluster's kubeconfig.
        root: The folder of the nodes' disks (created on demand by the agents).
        hf_endpoint: The Hugging Face Hub endpoint the agents download from (the local
            :class:`~kubeforge.sim.hub.HubStandIn`'s ``url``); None: ``HF_ENDPOINT`` or the Hub.
        interval: Seconds between an agent's syncs (its ModelCacheNode read), float.

    Attributes:
        agents: node -> its agent, for the nodes started.
    """

    def __init__(self, kubeconfig: str, root: Path, hf_endpoint: str | None = None, interval: float = 0.5) -> None:
        self.kubeconfig, self.root, self.hf_endpoint, self.interval = kubeconfig, Path(root), hf_endpoint, interval
        self.agents: dict[str, CacheAgent] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def disk(self, node: str) -> Path:
        """The folder that stands for ``node``'s disk."""
        return self.root / node

    def start(self, nodes: Iterable[str]) -> None:
        """Start one agent thread (a daemon) for each of ``nodes`` not started yet; its identity
        (``status.agent``) is ``agent-<node>``."""
        for node in nodes:
            if node in self.agents:
                continue
            agent = CacheAgent(node, NodeDiskApi(self.kubeconfig, self.root), identity=f"agent-{node}",
                               hf_endpoint=self.hf_endpoint)
            t = threading.Thread(target=agent.run, args=(self._stop, self.interval), name=f"agent-{node}", daemon=True)
            t.start()
            self.agents[node] = agent
            self._threads.append(t)

    def stop(self, timeout: float = 30.0) -> None:
        """Ask every agent to stop and wait for each thread, ``timeout`` seconds at most each (an
        agent stops between syncs: a download under way finishes first)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=timeout)

    def __enter__(self) -> "LocalAgents":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
