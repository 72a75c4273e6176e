"""Scale bench (issue 31, item 2): how one admission round's CPU grows with the fleet (nodes) and
the queue (gangs), and the memory held at 50,000 jobs, replayed through kubeforge's own pure
admission core (``kubeforge.admission.plan_admission`` with the runtime's ``AdmissionMemo``),
as ``e2e.bench.preemption`` and ``e2e.bench.nvl72`` do: no cluster, no HTTP, no writes.

Modules: :mod:`~e2e.bench.scale.workload` (fleet, pool, gangs from the Alibaba trace),
:mod:`~e2e.bench.scale.rounds` (the cold, written, steady and release rounds of one size),
:mod:`~e2e.bench.scale.memory` (RSS and the Python heap, in a process of their own),
:mod:`~e2e.bench.scale.report` (tables, growth exponents, the PNG), :mod:`~e2e.bench.scale.cli`.
It measures; it asserts nothing. See e2e/README-scale-bench.md.
"""
