"""kubeforge's end-to-end flows and benchmarks, as one package run from the repository root.

- :mod:`e2e.bench`: the benchmarks (``python -m e2e.bench.<name>``, or ``make bench-<name>``)
  and their shared library :mod:`e2e.bench.lib`;
- :mod:`e2e.peers`: the peers kubeforge is measured against (Kueue, JobSet, LeaderWorkerSet),
  built by ``hack/build-peers.sh`` and run for real on the sim;
- :mod:`e2e.chaos`: the hostile corpus, lifecycles and invariants of ``tests/test_chaos_cluster.py``.

Data beside the code: ``fleets/`` (the benches' kwok fleets), ``hostile/`` (the hostile
manifests), ``results/`` (the PNGs the benches draw), ``kind-config.yaml`` (for users with
Docker). Nothing here edits ``sys.path``: run from the repository root (``python -m``), and
pytest finds the package through ``pythonpath`` in pyproject.toml.
"""
