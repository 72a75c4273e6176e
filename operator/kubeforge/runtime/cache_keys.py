"""How the books of :class:`kubeforge.runtime.cache.Cache` key an object.

A TrainingJob's entries are keyed by its ``(namespace, name)``; an InferenceService's entries
in the books both kinds use are keyed by :func:`service_key`.
"""

from __future__ import annotations

from kubeforge.objects import Key


def service_key(key: Key) -> tuple[str, str, str]:
    """The key of an InferenceService in the books that TrainingJobs use too (our own last
    status write, a status write in flight, expected creates and deletes, held Events):
    ``("InferenceService", namespace, name)``. A job's entries there are keyed by
    ``(namespace, name)``, so a TrainingJob and an InferenceService of the same name in one
    namespace never read each other's: once they did, and the service's status write made the
    job look unplaced to the next admission round, which placed it a second time.

    Args:
        key: The service's ``(namespace, name)``.

    Returns:
        ``("InferenceService", namespace, name)``.
    """
    return ("InferenceService", key[0], key[1])
