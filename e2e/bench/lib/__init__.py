"""What the benchmarks share, one concern per module:

- :mod:`~e2e.bench.lib.source`: the repository root and the kubeforge code a bench drives
  (``--operator-src``);
- :mod:`~e2e.bench.lib.timing`: progress lines, timestamps, bounded waits;
- :mod:`~e2e.bench.lib.stats`: percentiles;
- :mod:`~e2e.bench.lib.tables`: the column tables the benches print;
- :mod:`~e2e.bench.lib.plots`: matplotlib when installed;
- :mod:`~e2e.bench.lib.traces`: the shipped traces, ``--trace`` and their credits;
- :mod:`~e2e.bench.lib.procs`: CPU, RSS and liveness of processes, operator logs;
- :mod:`~e2e.bench.lib.cluster`: the local cluster: API client, fleet, namespaces, pool, operator;
- :mod:`~e2e.bench.lib.watch`: list-then-watch loops with raw JSON;
- :mod:`~e2e.bench.lib.metrics`: Prometheus text counters of the API server, the operator and
  the control plane;
- :mod:`~e2e.bench.lib.replay`: what the pure admission replays share (clock, priorities,
  Kueue's rules).

Nothing is imported here: ``python -m e2e.bench.training`` must be able to choose the kubeforge
code (``--operator-src``) before anything imports it.
"""
