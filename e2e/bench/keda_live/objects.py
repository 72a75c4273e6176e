"""The objects of the KEDA side, as a user writes them (pure): the Deployment of simulated model
servers, the ScaledObject with a Prometheus trigger on ``vllm:num_requests_waiting``, and how
the API server reaches KEDA's metrics adapter (an aggregated API) on this machine.

How the aggregated API is reached: kube-apiserver sends ``external.metrics.k8s.io`` requests to
the Service named in the APIService. With ``--enable-aggregator-routing`` it takes that Service's
Endpoints (whose addresses may not be loopback, and the sim runs its adapter on loopback); without
it (the default) it takes the ClusterIP, which nothing routes here (no kube-proxy), **or, for a
Service of type ExternalName, the external name itself** (k8s.io/apiserver
``pkg/util/proxy.ResolveCluster``). So the Service is ``type: ExternalName, externalName:
localhost`` and the APIService names the adapter's loopback port: no API server flag, no
non-loopback address, no network namespace. The aggregator authenticates to the adapter with
kwok's front-proxy client certificate (``--proxy-client-cert-file``, the admin certificate);
the adapter trusts kwok's CA for it (``--client-ca-file``) and checks with a
SubjectAccessReview as usual. The APIService skips TLS verification of the adapter as KEDA's
own manifest does (``config/metrics-server/api_service.yaml``).
"""

from __future__ import annotations

__all__ = ["KEDA_NAMESPACE", "METRICS_SERVICE", "SERVICE_LABEL", "api_service", "deployment", "metrics_service", "prometheus_query", "scaled_object"]

SERVICE_LABEL = "kubeforge.io/inference-service"
"""The label the model-server simulator counts a service's pods by (``kubeforge.sim.modelserver``)."""

KEDA_NAMESPACE = "keda"
METRICS_SERVICE = "keda-metrics-apiserver"


def prometheus_query(namespace: str, service: str) -> str:
    """The service's total queue: every replica's waiting requests plus the simulator's held queue
    (exported as ``vllm:num_requests_waiting`` without a ``pod`` label), as kubeforge's
    ``VLLMWaiting`` query sums them."""
    return f'sum(vllm:num_requests_waiting{{namespace="{namespace}",service="{service}"}})'


def deployment(namespace: str, name: str, template: dict, node_selector: dict[str, str], gpus: int = 1,
               replicas: int = 1) -> dict:
    """A Deployment of ``replicas`` simulated model servers: ``template``'s pod spec (the same
    containers and grace period as kubeforge's live InferenceService), one ``nvidia.com/gpu`` each
    (``gpus``), on the nodes ``node_selector`` picks, labelled so that the simulator serves them
    as service ``name``."""
    spec = dict(template.get("spec") or {})
    spec["nodeSelector"] = dict(node_selector)
    spec["containers"] = [
        {**c, "resources": {**(c.get("resources") or {}), "limits": {"nvidia.com/gpu": str(gpus)}}}
        for c in spec.get("containers") or []]
    labels = {SERVICE_LABEL: name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": spec}}}


def scaled_object(namespace: str, name: str, prometheus_url: str, target: float, min_replicas: int,
                  max_replicas: int, polling_seconds: int, scale_down: dict | None) -> dict:
    """KEDA's ScaledObject for Deployment ``name``: a ``prometheus`` trigger on the service's queue
    (:func:`prometheus_query`) with ``threshold`` = ``target`` waiting requests per replica (metric
    type AverageValue, KEDA's default: the HPA asks for ceil(queue / target) replicas).

    Args:
        namespace, name: the Deployment (and the ScaledObject's name).
        prometheus_url: the Prometheus the trigger queries.
        target: waiting requests per replica (kubeforge's ``targetPerReplica``).
        min_replicas, max_replicas: ``minReplicaCount`` / ``maxReplicaCount``.
        polling_seconds: ``pollingInterval``.
        scale_down: kubeforge's ``autoscaling.scaleDown`` (``stabilizationWindowSeconds``,
            ``maxStep``, ``periodSeconds``) turned into the HPA's ``behavior.scaleDown``; None
            leaves the HPA's defaults. Scale-up always keeps the HPA's default behaviour.
    """
    spec: dict = {"scaleTargetRef": {"name": name}, "pollingInterval": polling_seconds,
                  "minReplicaCount": min_replicas, "maxReplicaCount": max_replicas,
                  "triggers": [{"type": "prometheus", "metadata": {
                      "serverAddress": prometheus_url, "query": prometheus_query(namespace, name),
                      "threshold": f"{target:g}"}}]}
    if scale_down:
        down: dict = {"stabilizationWindowSeconds": int(scale_down.get("stabilizationWindowSeconds", 300))}
        if scale_down.get("maxStep"):
            down["policies"] = [{"type": "Pods", "value": int(scale_down["maxStep"]),
                                 "periodSeconds": int(scale_down.get("periodSeconds", 15))}]
        spec["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": down}}}
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def metrics_service(port: int, namespace: str = KEDA_NAMESPACE, name: str = METRICS_SERVICE) -> dict:
    """The Service the APIService names: ExternalName ``localhost`` (see the module docstring)."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": "localhost",
                     "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}}


def api_service(port: int, namespace: str = KEDA_NAMESPACE, name: str = METRICS_SERVICE) -> dict:
    """``v1beta1.external.metrics.k8s.io`` served by the adapter at ``localhost:port``."""
    return {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1beta1.external.metrics.k8s.io"},
            "spec": {"service": {"name": name, "namespace": namespace, "port": port},
                     "group": "external.metrics.k8s.io", "version": "v1beta1", "insecureSkipTLSVerify": True,
                     "groupPriorityMinimum": 100, "versionPriority": 100}}
