"""Reasons and outcomes of the activator, each a constant used by name (JobSet's constants.go).

A *reason* is why a request was answered the way it was: it is the ``reason`` field of every
JSON error body the activator writes and the word its logs use. An *outcome* is the value of the
``outcome`` label of ``kubeforge_activator_requests_total``; every request a known service
received ends in exactly one.
"""

from __future__ import annotations

# --- reasons (JSON error bodies) ----------------------------------------------------------
QUEUE_FULL = "QueueFull"
"""429: the service's held requests reached its queue limit."""
HOLD_TIMEOUT = "HoldTimeout"
"""503: held for holdSeconds and no replica became Ready."""
SERVICE_REMOVED = "ServiceRemoved"
"""503: the service's EndpointSlice was deleted, or the activator is stopping, while the
request was held."""
UNKNOWN_SERVICE = "UnknownService"
"""404: the Host header or X-Kubeforge-Service names no InferenceService the activator knows."""
NO_SERVICE_NAMED = "NoServiceNamed"
"""404: neither the Host header nor X-Kubeforge-Service names a service."""
NOT_SYNCED = "NotSynced"
"""503: the activator has not listed the EndpointSlices yet."""
OVERLOADED = "Overloaded"
"""503: the activator holds or forwards --max-requests requests already."""
LOOP_DETECTED = "LoopDetected"
"""508: the request already went through an activator (it carries the activator's marker)."""
BODY_TOO_LARGE = "BodyTooLarge"
"""413: the request body is larger than --max-body-bytes."""
BACKEND_UNREACHABLE = "BackendUnreachable"
"""502: no backend accepted a connection, or one broke off before answering."""
BACKEND_TIMEOUT = "BackendTimeout"
"""504: the backend did not answer within --forward-timeout."""

# --- outcomes (label of kubeforge_activator_requests_total) ---------------------------------
FORWARDED = "forwarded"
"""A backend answered (whatever its status code); the answer was passed back."""
REJECTED = "rejected"
"""Answered at once because a bound was reached (queue limit, body size, --max-requests)."""
TIMED_OUT = "timed_out"
"""Held for holdSeconds, then answered 503."""
FAILED = "failed"
"""Could not be forwarded: backend unreachable or too slow, loop, service removed while held."""
CANCELLED = "cancelled"
"""The client went away first."""
OUTCOMES = (FORWARDED, REJECTED, TIMED_OUT, FAILED, CANCELLED)
