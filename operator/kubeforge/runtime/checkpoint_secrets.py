"""Whether the Secret a job's object store names exists, asked right before its pods are made.

A worker whose ``envFrom`` (or ``secretKeyRef``) names a missing Secret never starts: the kubelet
holds its container in ``CreateContainerConfigError``, and the gang would hold its GPUs until its
startup timeout. kubeforge keeps no index of Secrets (it lists and watches none, so it never holds
their data): it asks the API server for the one Secret's metadata alone
(``PartialObjectMetadata``: the data never reaches the operator), once per gang start, and hands
a 404 to the next decision, which releases the GPUs and says ``SecretNotFound``
(:func:`kubeforge.lifecycle.plan_training`).

- A Secret seen is believed for :data:`FOUND_SECONDS` (a burst of jobs sharing one Secret asks
  once); a missing one is asked again at every start (creating it lets the next try start).
- Without the right to read Secrets (403: the chart's ``rbac.checkpointSecrets`` off), nothing
  is checked for :data:`FORBIDDEN_SECONDS` and the pods are made: the kubelet's
  ``CreateContainerConfigError`` is then reported at the startup timeout, as before.
- No answer (timeouts, 5xx, 429): raised, the work queue retries with its backoff.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kubeforge.runtime.client import ApiError, KubeClient

log = logging.getLogger("kubeforge.training")

METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""The ``Accept`` header that has the API server send an object's metadata only."""
FOUND_SECONDS = 60.0
"""How long a Secret seen is believed to exist."""
FORBIDDEN_SECONDS = 300.0
"""How long the operator stops asking after a 403."""
MAX_REMEMBERED = 10_000
"""Secrets remembered at most (the book is cleared beyond)."""


@dataclass
class SecretCheck:
    """The Secrets seen lately, and whether the operator may ask at all.

    Attributes:
        found: ``(namespace, name)`` -> when it was last seen (monotonic seconds).
        forbidden_until: No asking before this (monotonic seconds), after a 403.
    """

    found: dict[tuple[str, str], float] = field(default_factory=dict)
    forbidden_until: float = 0.0

    async def missing(self, client: KubeClient, namespace: str, name: str, now: float) -> ApiError | None:
        """The 404 when Secret ``namespace/name`` does not exist; None when it does or when the
        operator may not ask (see the module's docstring).

        Args:
            client: The API client.
            namespace: The job's namespace.
            name: ``spec.checkpoint.objectStore.secretName``.
            now: Monotonic seconds.

        Raises:
            ApiError: no answer, or any refusal but 403 and 404.
        """
        seen = self.found.get((namespace, name))
        if (seen is not None and now - seen < FOUND_SECONDS) or now < self.forbidden_until:
            return None
        try:
            await client.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}", accept=METADATA_ONLY,
                                 resource="secrets")
        except ApiError as e:
            if e.code == 404:
                self.found.pop((namespace, name), None)
                return e
            if e.code == 403:
                log.warning("may not read Secrets (%s): object-store Secrets are not checked before the pods are "
                            "made for %.0fs; a missing one shows at the startup timeout", e.message, FORBIDDEN_SECONDS)
                self.forbidden_until = now + FORBIDDEN_SECONDS
                return None
            raise
        if len(self.found) >= MAX_REMEMBERED:
            self.found.clear()
        self.found[(namespace, name)] = now
        return None


SECRETS = SecretCheck()
"""This process's book (one operator per process)."""
