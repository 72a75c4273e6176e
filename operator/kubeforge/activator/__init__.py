"""The kubeforge activator: holds requests for an InferenceService at zero ready replicas.

While a service has no ready replica, the operator points the service's EndpointSlice
(``kubeforge-<service>``, ``kubeforge.io/endpoints: activator``) at the activator pods. The
activator names the service from the Host header (or ``X-Kubeforge-Service``), holds the request
in a bounded FIFO per service, exports the queue length (the activation signal the autoscaler
reads), and forwards every held request once the slice says ``replicas`` with ready addresses.

Layers: :mod:`._slices`, :mod:`._route` and :mod:`._hold` are pure (``now`` is a parameter);
:mod:`._server` (aiohttp.web), :mod:`._proxy` (aiohttp client), :mod:`._watch`
(kubernetes_asyncio) and :mod:`._main` do the I/O.
"""

from ._hold import Admission, Answer, AnswerKind, Forward, Hold, Reject, RequestBuffer
from ._main import serve
from ._metrics import ActivatorMetrics
from ._route import MARKER_HEADER, SERVICE_HEADER, identify, service_from_header, service_from_host
from ._server import Activator, ActivatorConfig
from ._slices import SERVICE_LABEL, Backend, HoldPolicy, ServiceKey, SliceView, parse_slice

__all__ = [
    "Activator", "ActivatorConfig", "ActivatorMetrics", "Admission", "Answer", "AnswerKind", "Backend", "Forward",
    "Hold", "HoldPolicy", "MARKER_HEADER", "Reject", "RequestBuffer", "SERVICE_HEADER", "SERVICE_LABEL",
    "ServiceKey", "SliceView", "identify", "parse_slice", "serve", "service_from_header", "service_from_host",
]
