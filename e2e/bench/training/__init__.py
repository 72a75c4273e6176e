"""Training bench: kubeforge gang admission against plain kube-scheduler (and Kueue + JobSet when
the peers are built) on a simulated GPU fleet, with the jobs cut from the Alibaba trace.

``python -m e2e.bench.training [--help]`` (``make bench-training``, ``make
bench-training-burst``); the description is :mod:`e2e.bench.training.cli`'s. Nothing is
imported here: ``--operator-src`` is read before kubeforge is.
"""
