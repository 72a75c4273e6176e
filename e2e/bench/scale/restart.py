"""``python -m e2e.bench.scale.restart CLUSTER``: restart the operator on a kept bench cluster and
time how soon it admits new TrainingJobs again.

Made for the 5,000-node run of e2e/README-scale-bench.md: run the training bench with ``--keep``
(its namespace ``bench-kubeforge`` full of running jobs), then this. It stops the operator the
bench left (SIGTERM), starts ``kubeforge run`` again from the code on ``PYTHONPATH`` (for another
tree: ``PYTHONPATH=DIR/operator:.``), and creates one 1x1-GPU probe TrainingJob every
``--every`` seconds for ``--seconds``. Then it prints, per probe, the seconds from the restart
to its creation and from its creation to ``Admitted=True``, both by the API server's own
timestamps (``creationTimestamp``, the condition's ``lastTransitionTime``; 1 s resolution), so
no watch of this process can miss one; and the operator's CPU over the run (``/proc``).

It measures; it asserts nothing about time. Probe names carry the start time, so it can be run
again on the same cluster.
"""

from __future__ import annotations

import argparse
import time
from typing import Sequence

from e2e.bench.lib.procs import cpu_seconds
from e2e.bench.lib.timing import ts
from e2e.bench.training.workload import Job, checkpoint_spec, training_job
from kubeforge.demo import start_operator, stop_operator
from kubeforge.sim.cluster import Cluster

NAMESPACE = "bench-kubeforge"


def admitted_after(obj: dict) -> float | None:
    """Seconds from a TrainingJob's creation to its ``Admitted=True`` condition, by the API
    server's timestamps; None while it has none."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Admitted" and cond.get("status") == "True" and cond.get("lastTransitionTime"):
            return ts(cond["lastTransitionTime"]) - ts(obj["metadata"]["creationTimestamp"])
    return None


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the flags, restart the operator, create the probes, print the table."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.scale.restart", description=__doc__.split("\n\n")[0])
    ap.add_argument("cluster", help="a kept sim cluster's name (the training bench's --cluster)")
    ap.add_argument("--seconds", type=float, default=150.0, help="how long to create probes (default 150)")
    ap.add_argument("--every", type=float, default=4.0, help="seconds between two probes (default 4)")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds to wait after the last probe (default 20)")
    ap.add_argument("--operator-args", default="", help="extra `kubeforge run` flags, space-separated")
    opts = ap.parse_args(argv)

    from kubernetes import client, config

    cluster = Cluster(opts.cluster)
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    prefix = f"restart-{int(time.time()) % 100000}-"
    stop_operator(cluster)
    t0 = time.time()
    pid = start_operator(cluster, args=tuple(opts.operator_args.split()))
    print(f"operator restarted (pid {pid}); probes {prefix}* every {opts.every:g} s for {opts.seconds:g} s", flush=True)
    created: dict[str, float] = {}
    while time.time() - t0 < opts.seconds:
        name = f"{prefix}{len(created):03d}"
        body = training_job(Job(name, 1, 1, "probe"), NAMESPACE, "Preferred", "nvlink", checkpoint_spec("object-store"))
        api.create_namespaced_custom_object("kubeforge.io", "v1alpha1", NAMESPACE, "trainingjobs", body)
        created[name] = time.time()
        time.sleep(opts.every)
    time.sleep(opts.settle)
    print(f"operator CPU {cpu_seconds(pid):.1f} s over {time.time() - t0:.0f} s")
    for name, at in created.items():
        obj = api.get_namespaced_custom_object("kubeforge.io", "v1alpha1", NAMESPACE, "trainingjobs", name)
        after = admitted_after(obj)
        print(f"{name} created +{at - t0:6.1f} s  Admitted after {'never' if after is None else f'{after:.0f} s'}")


if __name__ == "__main__":
    main()
