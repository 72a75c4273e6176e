"""Activation: how requests that reach an InferenceService at zero ready replicas are held.

While a service has no ready replica, the operator points its Service at the kubeforge
activator (``kubeforge activator``) through the service's EndpointSlice: the slice is labelled
``kubeforge.io/endpoints: activator``, lists the activator pods, and carries the two annotations
below. The activator holds each request in a bounded FIFO per service until a replica is Ready
(the slice then says ``replicas``) and forwards it, or answers it when the hold budget or the
queue bound runs out.

The defaults here are the only ones: the activator reads them when an annotation is absent, and
the operator writes them when ``spec.activation`` leaves a field out.
"""

from __future__ import annotations

from pydantic import Field

from ._base import KubeModel

DEFAULT_ACTIVATION_HOLD_SECONDS = 300
"""Seconds a request is held at zero replicas before it is answered 503. Knative Serving's
default request timeout (``timeoutSeconds: 300``), which its activator holds requests for: long
enough for a GPU node to be provisioned and a model to load, short enough that a client's own
timeout (often 600 s for LLM SDKs) has not already given up."""
MAX_ACTIVATION_HOLD_SECONDS = 3600
"""Upper bound of ``holdSeconds`` (Knative's ``max-revision-timeout-seconds`` default is 600;
one hour covers the slowest node provisioning seen in practice)."""

DEFAULT_ACTIVATION_QUEUE_LIMIT = 1000
"""Requests held per service and activator replica before new ones get 429. Enough for a
burst of a few hundred requests per second for a few seconds; a chat request body is a few KiB,
so 1,000 held requests cost a few MiB of activator memory."""
MAX_ACTIVATION_QUEUE_LIMIT = 100_000
"""Upper bound of ``queueLimit`` (Knative's activator breaker queue depth is 10,000 for the
whole activator)."""

ENDPOINTS_LABEL = "kubeforge.io/endpoints"
"""Label on the operator's EndpointSlice ``kubeforge-<service>``: what its addresses are."""
ENDPOINTS_REPLICAS = "replicas"
"""``kubeforge.io/endpoints`` value: the addresses are the service's Ready leader pods."""
ENDPOINTS_ACTIVATOR = "activator"
"""``kubeforge.io/endpoints`` value: the addresses are the activator pods (no ready replica)."""
HOLD_SECONDS_ANNOTATION = "kubeforge.io/activation-hold-seconds"
"""Annotation on an ``activator`` slice: holdSeconds, an integer as a string."""
QUEUE_LIMIT_ANNOTATION = "kubeforge.io/activation-queue-limit"
"""Annotation on an ``activator`` slice: queueLimit, an integer as a string."""
ENDPOINT_PORT_NAME = "http"
"""Name of the slice's port: the model port (``replicas``) or the activator's (``activator``)."""


class Activation(KubeModel):
    """Activation says how requests that arrive while the service has no ready replica are held.

    The kubeforge activator holds them, in arrival order, until a replica is Ready, then
    forwards them; past ``holdSeconds`` a request is answered 503 with ``Retry-After``, and
    beyond ``queueLimit`` held requests a new one is answered 429 with ``Retry-After``.
    """

    hold_seconds: int = Field(
        default=DEFAULT_ACTIVATION_HOLD_SECONDS,
        ge=1,
        le=MAX_ACTIVATION_HOLD_SECONDS,
        description="holdSeconds is how long a request that arrives at zero ready replicas is "
        "held waiting for one (node provisioning and model load included) before it is "
        "answered 503 with Retry-After. Default 300 (Knative Serving's request timeout).",
    )
    queue_limit: int = Field(
        default=DEFAULT_ACTIVATION_QUEUE_LIMIT,
        ge=1,
        le=MAX_ACTIVATION_QUEUE_LIMIT,
        description="queueLimit is the most requests held at once for this service by each "
        "activator replica; beyond it a new request is answered 429 with Retry-After. "
        "Default 1000.",
    )

    def annotations(self) -> dict[str, str]:
        """The annotations the operator writes on the service's ``activator`` EndpointSlice.

        Returns:
            ``{HOLD_SECONDS_ANNOTATION: "<int>", QUEUE_LIMIT_ANNOTATION: "<int>"}``.
        """
        return {HOLD_SECONDS_ANNOTATION: str(self.hold_seconds), QUEUE_LIMIT_ANNOTATION: str(self.queue_limit)}
