"""kubeforge.sim: the local GPU cluster (a real control plane, simulated GPU nodes) and the
helpers the demo, the tests and the benches run beside it.

The process helpers are exported here (:mod:`kubeforge.sim._process` is their home): a free
loopback port, a detached child with a pid file, a bounded wait for an HTTP answer, stops, the
kubeforge processes still aimed at a cluster.
"""

from kubeforge.sim._process import (free_port, kubeforge_processes, start_detached, stop_pidfile, stop_pids,
                                    stop_process, wait_http_ok)

__all__ = ["free_port", "kubeforge_processes", "start_detached", "stop_pidfile", "stop_pids", "stop_process",
           "wait_http_ok"]
