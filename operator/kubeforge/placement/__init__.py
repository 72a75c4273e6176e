"""kubeforge.placement: the pure placement core.

Pools, topology domains, gang fitting, admission and node affinity, as functions of plain
frozen dataclasses. No I/O, no Kubernetes client, no clock.

Typical use by a handler::

    nodes = [node_info(node_from_k8s(n), pool.gpu_resource, allocated[n_name]) for n in raw]
    levels = pool_levels or detect_levels(nodes)
    status = summarize_pool(nodes, levels)
    result = place_gang(request, nodes, levels, taken)  # a Placement or a NoFit
    ...  # Placement -> pods with node_affinity(placement, rank, levels)
"""

from ._affinity import node_affinity
from ._fit import place_gang
from ._index import PoolIndex
from ._room import GangRoom
from ._misfit import HOSTNAME_LABEL, format_quantity, node_misfit
from ._model import (
    MODES,
    NodeFilter,
    GangRequest,
    Mode,
    NodeInfo,
    NoFit,
    PendingGang,
    Placement,
    Result,
    TopologyLevel,
)
from kubeforge.objects import INTERRUPTION_TAINT_PREFIXES

from ._nodes import (
    SPOT_LABELS,
    CapacityType,
    capacity_type,
    node_info,
)
from ._summary import (
    DEFAULT_MAX_DOMAINS_PER_LEVEL,
    DomainSummary,
    GpuCounts,
    PoolSummary,
    summarize_pool,
)
from ._topology import WELL_KNOWN_LEVELS, detect_levels, with_paths

__all__ = [
    "HOSTNAME_LABEL",
    "format_quantity",
    "node_misfit",
    "DEFAULT_MAX_DOMAINS_PER_LEVEL",
    "INTERRUPTION_TAINT_PREFIXES",
    "MODES",
    "SPOT_LABELS",
    "WELL_KNOWN_LEVELS",
    "CapacityType",
    "DomainSummary",
    "GangRequest",
    "GangRoom",
    "GpuCounts",
    "Mode",
    "NoFit",
    "NodeFilter",
    "NodeInfo",
    "PendingGang",
    "Placement",
    "PoolIndex",
    "PoolSummary",
    "Result",
    "TopologyLevel",
    "capacity_type",
    "detect_levels",
    "node_affinity",
    "node_info",
    "place_gang",
    "summarize_pool",
    "with_paths",
]
