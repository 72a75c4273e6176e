"""Serving placement bench (issue 13): multi-node InferenceService groups beside training
gangs, kubeforge against the same groups as plain pods with LeaderWorkerSet-style pod affinity
left to kube-scheduler. ``python -m e2e.bench.serving [--help]`` (``make bench-serving``).

Modules: the command (:mod:`~e2e.bench.serving.cli`), one phase's replay
(:mod:`~e2e.bench.serving.run`), the phases' drivers (:mod:`~e2e.bench.serving.phases`), what
the pod watch sees (:mod:`~e2e.bench.serving.observe`), the workload
(:mod:`~e2e.bench.serving.workload`) and the figures (:mod:`~e2e.bench.serving.report`).
Nothing is imported here: ``--operator-src`` is read before kubeforge is.
"""
