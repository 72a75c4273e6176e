"""The demo's private parts (``kubeforge demo``); the public surface is :mod:`kubeforge.demo`.

- :mod:`.ledger`: pure: the GPUs the pods hold per workload and per domain, and whether a
  GPUPool's status agrees with them (what the demo waits on before it prints the pool);
- :mod:`.report`: pure: the lines the demo prints (placements, groups, the pool table);
- :mod:`.kube`: reading the cluster with the kubernetes client (JSON, as kubectl shows it);
- :mod:`.timeline`: samples of the pool and the chat service over the demo (a thread);
- :mod:`.serving`: Prometheus, the model-server simulator and the activator on loopback, and
  the burst of requests replayed from the Azure trace;
- :mod:`.plot`: the two-panel PNG (matplotlib).
"""
