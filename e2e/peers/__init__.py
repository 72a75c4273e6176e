"""The peers kubeforge is measured against, run for real on the sim: Kueue, JobSet, LeaderWorkerSet.

Built by ``hack/build-peers.sh`` (Go module proxy, cached by version); see e2e/README-peers.md.

- :func:`peers_bin` / :func:`build_peers` / :data:`BUILD_HINT`: whether they are built, build them;
- :mod:`e2e.peers.stack`: start / stop their managers against a sim cluster (CRDs, loopback webhooks);
- :mod:`e2e.peers.queues`: Kueue objects and JobSets as a user writes them;
- :mod:`e2e.peers.lws`: install LeaderWorkerSet on a sim cluster, create an LWS, wait for its pods.

The benches that run them: the training bench's "Kueue + JobSet" phase
(:mod:`e2e.bench.training.kueue`) and the live preemption bench (:mod:`e2e.bench.preemption_live`).
"""

from ._build import BUILD_HINT, PeersError, build_peers, peers_bin

__all__ = ["BUILD_HINT", "PeersError", "build_peers", "peers_bin"]
