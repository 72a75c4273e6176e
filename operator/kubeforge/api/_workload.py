"""Pieces shared by TrainingJob and InferenceService."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any

from pydantic import Field

from ._base import DNS_SUBDOMAIN_PATTERN, MAX_LABEL_LENGTH

MAX_POOL_NAME_LENGTH = MAX_LABEL_LENGTH
"""GPUPool names are label values (``kubeforge.io/pool``) on the pods placed in the pool."""

PoolName = Annotated[
    str, Field(min_length=1, max_length=MAX_POOL_NAME_LENGTH, pattern=DNS_SUBDOMAIN_PATTERN)
]


class TopologyMode(str, Enum):
    """TopologyMode says how strictly replicas are kept inside one topology domain."""

    REQUIRED = "Required"
    PREFERRED = "Preferred"
    NONE = "None"


def pools_field(what: str) -> Any:
    """Returns the Field of a ``pools`` list."""
    return Field(
        min_length=1,
        max_length=8,
        description=f"pools are the names of the GPUPools that may run the {what}, in order of "
        "preference: the first pool with room is used (for example a spot pool first, then an "
        "on-demand pool as fallback).",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )


def check_unique_pools(pools: list[str]) -> list[str]:
    """Raises ValueError when a pool is named twice."""
    if len(pools) != len(set(pools)):
        raise ValueError("pools must not name a pool twice")
    return pools
