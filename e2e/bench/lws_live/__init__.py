"""Live multi-node group start: create -> every pod of each replica group Ready, kubeforge's
InferenceService groups against the real LeaderWorkerSet (v0.7.0, ``make peers``), on the same
8-node sim fleet, rounds alternating between them (issue 28's target: kubeforge's p50 at most
1.5x LWS's). ``python -m e2e.bench.lws_live [--help]`` (``make bench-lws-live``); the
description is :mod:`e2e.bench.lws_live.cli`'s. Modules: the rounds (``cli``), the two systems
(``systems``), what the watches saw (``track``, pure), the figures (``summary``, pure) and
their table (``report``).
"""
