"""The two systems that start multi-node replica groups, behind one small interface:
``setup()`` once, then per round ``before_round()``, ``create(name)`` (one object with
``replicas`` groups of ``size`` pods x ``gpus`` GPUs, each group inside one NVLink domain),
``delete(name)``, ``after_round()``; ``teardown()`` at the end. Each creates its object through
the API client (one call, no kubectl start-up inside the measured time).

- :class:`KubeforgeGroups`: an InferenceService whose replica is tensor 8 x pipeline
  ``size`` (a group of ``size`` pods of 8 GPUs), ``minReplicas = maxReplicas = replicas``,
  topology Required at the pool's ``nvlink`` level, ``prometheusURL`` a closed loopback port
  (no Prometheus answers, so the autoscaler holds the count: tests/test_serving_cluster.py).
  The operator runs during its rounds only: started before, stopped after.
- :class:`LwsGroups`: a LeaderWorkerSet of ``size`` with ``replicas`` groups, ``gpus`` per pod,
  ``leaderworkerset.sigs.k8s.io/exclusive-topology: nvidia.com/gpu.clique``, kept on the fleet
  with a ``nodeSelector``; the real LWS manager (:mod:`e2e.peers.lws`) runs all along (idle
  during kubeforge's rounds), kubeforge's operator is stopped during its rounds.
"""

from __future__ import annotations

from kubeforge.sim.fleet import FLEET_LABEL

from e2e.bench.lib.cluster import (CLIQUE, GROUP, POOL, VERSION, apply_pool, operator_log, start_operator,
                                   stop_operator, wait_for_pool)
from e2e.bench.lib.timing import Abort, say, wait_until
from e2e.peers import lws

__all__ = ["KubeforgeGroups", "LwsGroups", "inference_service"]

LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"


def inference_service(name: str, namespace: str, replicas: int, size: int, gpus: int, pool: str = POOL) -> dict:
    """An InferenceService of ``replicas`` multi-node replicas, each ``size`` pods of ``gpus``
    GPUs (tensor ``gpus`` x pipeline ``size``) inside one NVLink domain; the count held fixed."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "pools": [pool], "parallelism": {"tensor": gpus, "pipeline": size},
            "minReplicas": replicas, "maxReplicas": replicas, "drainSeconds": 0,
            "topology": {"mode": "Required", "level": "nvlink"},
            "autoscaling": {"prometheusURL": "http://127.0.0.1:1", "pollingIntervalSeconds": 1},
            "template": {"spec": {"terminationGracePeriodSeconds": 0, "containers": [
                {"name": "vllm", "image": "vllm/vllm-openai:v0.6.4",
                 "command": ["vllm", "serve", "meta-llama/Llama-3.1-405B-Instruct"]}]}},
        },
    }


class _Base:
    system = ""
    plural = ""

    def __init__(self, c, api, namespace: str, fleet_name: str, replicas: int, size: int, gpus: int) -> None:
        from kubernetes import client

        self.c, self.ns, self.fleet = c, namespace, fleet_name
        self.replicas, self.size, self.gpus = replicas, size, gpus
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

    def _gv(self) -> tuple[str, str]:
        return (GROUP, VERSION) if self.system == "kubeforge" else (LWS_GROUP, LWS_VERSION)

    def create(self, name: str) -> None:
        """Create the object (one API call)."""
        g, v = self._gv()
        self.custom.create_namespaced_custom_object(g, v, self.ns, self.plural, self.body(name), _preload_content=False)

    def body(self, name: str) -> dict:
        """The object to create."""
        raise NotImplementedError

    def delete(self, name: str, timeout: float) -> bool:
        """Delete the object and wait (at most ``timeout`` s) until it and every pod of the
        namespace are gone; returns whether they went."""
        g, v = self._gv()
        try:
            self.custom.delete_namespaced_custom_object(g, v, self.ns, self.plural, name, _preload_content=False)
        except Exception as e:  # noqa: BLE001 - said; the wait below tells whether it went
            say(f"{self.system}: delete {name} failed ({type(e).__name__}: {str(e)[:160]})")

        def gone() -> bool:
            pods = self.core.list_namespaced_pod(self.ns, _request_timeout=30).items
            objs = self.custom.list_namespaced_custom_object(g, v, self.ns, self.plural, _request_timeout=30)["items"]
            return not pods and not objs

        return wait_until(gone, timeout, f"{self.system}: {name} and its pods to go", 0.5)

    def before_round(self) -> None:
        """Get ready for a round (nothing by default)."""

    def after_round(self) -> None:
        """Clean up after a round (nothing by default)."""


class KubeforgeGroups(_Base):
    """kubeforge: the operator and one GPUPool over the fleet, an InferenceService a round."""

    system, plural = "kubeforge", "inferenceservices"

    def setup(self, capacity: int) -> None:
        """The pool over the fleet (label ``kubeforge.io/sim-fleet``); the operator is started per round."""
        self.capacity = capacity
        apply_pool(self.c, self.fleet)

    def before_round(self) -> None:
        """Clear the pool's status, start the operator and wait (at most 120 s) until it has
        written the pool's status with the fleet's GPUs: the operator is up and sees the fleet
        (the status the previous round's operator wrote would pass at once, before this one runs).

        Raises:
            Abort: it exited, or never showed them.
        """
        self.c.kubectl("patch", "gpupool", POOL, "--subresource=status", "--type=merge", "-p", '{"status":null}')
        pid = start_operator(self.c)
        if not wait_for_pool(self.custom, pid, operator_log(self.c), self.capacity, 120):
            raise Abort(f"the operator's pool never showed {self.capacity} GPUs; its log: {operator_log(self.c)}")

    def after_round(self) -> None:
        """Stop the operator (the LWS rounds run without it)."""
        stop_operator(self.c)

    def body(self, name: str) -> dict:
        """The InferenceService."""
        return inference_service(name, self.ns, self.replicas, self.size, self.gpus)

    def teardown(self) -> None:
        """Stop the operator if it runs."""
        stop_operator(self.c)


class LwsGroups(_Base):
    """The real LeaderWorkerSet: its manager for the whole run, a LeaderWorkerSet a round."""

    system, plural = "lws", LWS_PLURAL

    def setup(self, capacity: int) -> None:
        """Install LWS (CRD, webhooks, manager)."""
        lws.install(self.c)

    def body(self, name: str) -> dict:
        """The LeaderWorkerSet."""
        return lws.leader_worker_set(name, self.ns, size=self.size, gpus=self.gpus, replicas=self.replicas,
                                     exclusive_topology=CLIQUE, node_selector={FLEET_LABEL: self.fleet})

    def teardown(self) -> None:
        """Stop the LWS manager."""
        lws.uninstall(self.c)
