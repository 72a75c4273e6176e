"""Live preemption bench: GPU-hours lost when high-priority gangs arrive on a full cluster,
kubeforge against Kueue's real preemption, on the same 16-node sim fleet and scenario.
``python -m e2e.bench.preemption_live [--help]`` (``make bench-preemption-live``); the
description is :mod:`e2e.bench.preemption_live.cli`'s.
"""
