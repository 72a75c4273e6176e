"""NVL72 bench (issue 15): multi-node NVLink gangs on 8 NVL72 racks, kubeforge's clique
placement and whole-domain preemption against a Kueue-like scattered victim choice, replayed
through the pure admission core. ``python -m e2e.bench.nvl72 [--help]`` (``make bench-nvl72``);
the description is :mod:`e2e.bench.nvl72.cli`'s, the model :mod:`~e2e.bench.nvl72.model`, the
replay :mod:`~e2e.bench.nvl72.sim`.
"""
