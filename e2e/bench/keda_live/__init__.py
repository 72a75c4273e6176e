"""Live autoscaling: kubeforge against the real KEDA + HPA on the same compressed trace segment
(issue 28's live target: kubeforge >= KEDA + HPA's attainment at <= its replica-minutes, 0
aborted). ``python -m e2e.bench.keda_live [--help]`` (``make bench-keda-live``); the description
is :mod:`e2e.bench.keda_live.cli`'s. Modules: the run order and flags (``cli``), one system's
segment (``run``), KEDA's processes (``stack``), the objects a user writes (``objects``, pure),
the figures (``summary``, pure) and their table (``report``). See e2e/README-keda-live.md.
"""
