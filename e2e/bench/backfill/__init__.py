"""Backfill bench (issue 27): big gangs under a steady stream of small jobs, BestEffortFIFO,
StrictFIFO and reservations with backfill through kubeforge's pure admission core, then live
against Kueue. ``python -m e2e.bench.backfill [--help]`` (``make bench-backfill``); the
description is :mod:`e2e.bench.backfill.cli`'s, the job mix :mod:`~e2e.bench.backfill.workload`,
the replay :mod:`~e2e.bench.backfill.replay`, the live part :mod:`~e2e.bench.backfill.live`.
"""
