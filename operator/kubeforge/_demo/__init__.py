"""The demo's private parts (``kubeforge demo``); the public surface is :mod:`kubeforge.demo`.

This package is :mod:`kubeforge.demo`'s own, as if it were its subpackage. The import rule:
a private top-level package ``kubeforge._x`` belongs to the public module ``kubeforge.x``, the
one module outside it that imports from it; everyone else (``kubeforge.cli``, the tests'
fixtures, the benches) uses the names ``kubeforge.demo`` exports. Modules here import only
each other, the standard library and public names of other packages (never ``kubeforge.demo``).

- :mod:`.scene`: what the demo applies and checks, its progress line, its result;
- :mod:`.steps`: the demo's steps, one function each, in the order ``kubeforge.demo.demo``
  runs them;
- :mod:`.ledger`: pure: the GPUs the pods hold per workload and per domain, and whether a
  GPUPool's status agrees with them (what the demo waits on before it prints the pool);
- :mod:`.report`: pure: the lines the demo prints (placements, groups, the pool table);
- :mod:`.kube`: reading the cluster with the kubernetes client (JSON, as kubectl shows it);
- :mod:`.pool`: the pool's status beside the pods, printed once they agree;
- :mod:`.timeline`: samples of the pool and the chat service over the demo (a thread);
- :mod:`.serving`: Prometheus, the model-server simulator and the activator on loopback, and
  the burst of requests replayed from the Azure trace;
- :mod:`.models`: model weights cached on the nodes (a pool keeping a model warm, real node
  agents, a cached replica start beside a cold one);
- :mod:`.plot`: the two-panel PNG (matplotlib).
"""
