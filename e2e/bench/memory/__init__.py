"""Memory bench: the operator's RSS as TrainingJobs and their pods grow to 5,000 / 20,000.
``python -m e2e.bench.memory [--help]`` (``make bench-memory``); the description is
:mod:`e2e.bench.memory.cli`'s, the run :mod:`~e2e.bench.memory.steps`. Nothing is imported
here: ``--operator-src`` is read before kubeforge is.
"""
