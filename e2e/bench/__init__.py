"""kubeforge's benchmarks: each prints its figures beside a baseline measured in the same run
and asserts no wall-clock time. Run from the repository root:

===============================  ==========================  ==========================================
module                           make target                 what it measures
===============================  ==========================  ==========================================
``e2e.bench.training``           ``bench-training(-burst)``  gang admission against kube-scheduler (and
                                                             Kueue + JobSet) on kwok nodes
``e2e.bench.memory``             ``bench-memory``            the operator's RSS at 5,000 TrainingJobs
``e2e.bench.autoscaling``        ``bench-autoscaling``       the SLO autoscaler against KEDA + HPA, llm-d,
                                                             Dynamo, in simulated time
``e2e.bench.serving``            ``bench-serving``           replica groups beside training gangs against
                                                             LWS-style pod affinity
``e2e.bench.preemption``         ``bench-preemption``        GPU-hours lost per preemption (pure replay)
``e2e.bench.nvl72``              ``bench-nvl72``             clique placement and whole-domain preemption
                                                             on 8 NVL72 racks (pure replay)
``e2e.bench.preemption_live``    ``bench-preemption-live``   the preemption scenario live, against Kueue
``e2e.bench.profile_operator``   ``profile-training``        the operator's CPU profile during the
                                                             training bench (py-spy)
===============================  ==========================  ==========================================

:mod:`e2e.bench.lib` holds what they share (clusters, processes, watches, API counters,
timing, percentiles, tables, plots, traces). The benches use the operator's public names only,
and :class:`kubeforge.admission.AdmissionRules` where they replay other rules.
"""
