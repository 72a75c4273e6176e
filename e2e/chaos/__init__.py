"""The chaos and hostile-input suite's library (run by tests/test_chaos_cluster.py).

- :mod:`chaos.kube`: a thin raw-JSON client, cheap enough to poll from many threads;
- :mod:`chaos.corpus`: the hostile corpus under ``e2e/hostile/``: load, apply, classify;
- :mod:`chaos.lifecycles`: TrainingJob lifecycles driven by a seeded RNG;
- :mod:`chaos.invariants`: what must hold once the operator has converged.
"""
