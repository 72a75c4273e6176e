"""Dynamic Resource Allocation (``resource.k8s.io/v1``) and NVIDIA ComputeDomains as kubeforge
reads them: what a node's driver publishes (ResourceSlice), what is allocated (ResourceClaim
``status.allocation``), and a multi-node NVLink gang's IMEX domain (ComputeDomain,
``resource.nvidia.com/v1beta1``). Pure: dicts in, frozen records out; never raises on odd content.

A DRA pool counts GPUs under the ledger key :func:`dra_key` (``dra:<driver>``): a name no
extended resource can have (those carry a ``/``), so the same ledger, pool view and quota code
count device-plugin GPUs and DRA devices alike (:func:`with_devices` puts a node's device count
into its allocatable under that key).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from kubeforge.accelerators import DRA_GPU_DEVICE_TYPES, nvidia

DRA_PREFIX = "dra:"


def dra_key(driver: str) -> str:
    """The ledger key of a DRA driver's GPUs: ``dra:<driver>``."""
    return f"{DRA_PREFIX}{driver}"


def is_dra_key(resource: str) -> bool:
    """Whether a ledger key names DRA devices (:func:`dra_key`)."""
    return resource.startswith(DRA_PREFIX)


def _attr(attrs: Mapping[str, Any], driver: str, name: str) -> Any:
    """A device attribute's value (``{"string": "gpu"}`` -> ``"gpu"``), looked up unqualified or
    qualified by the driver's domain (``<driver>/type``), as the scheduler's CEL does."""
    raw = attrs.get(name)
    if raw is None:
        raw = attrs.get(f"{driver}/{name}")
    if isinstance(raw, Mapping):
        for k in ("string", "int", "bool", "version"):
            if k in raw:
                return raw[k]
    return None


@dataclass(frozen=True, slots=True)
class SliceView:
    """One ResourceSlice: the devices one driver publishes for one node.

    Attributes:
        name: ``metadata.name``.
        driver: ``spec.driver``.
        pool: ``spec.pool.name`` (NVIDIA's driver: the node's name).
        node: ``spec.nodeName``, or None for slices not local to one node.
        gpus: Names of its devices whose ``type`` attribute is absent or a whole GPU of some
            vendor (:data:`kubeforge.accelerators.DRA_GPU_DEVICE_TYPES`: NVIDIA's driver's
            ``gpu``; its ``mig`` devices and others are not GPUs of a pool).
        devices: Names of all its devices.
    """

    name: str
    driver: str
    pool: str
    node: str | None
    gpus: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()


def slice_from_k8s(body: Mapping[str, Any]) -> SliceView:
    """A :class:`SliceView` from a ResourceSlice (``resource.k8s.io/v1``: devices are flat,
    attributes keyed by name with one typed value each)."""
    md = body.get("metadata") or {}
    spec = body.get("spec") or {}
    driver = str(spec.get("driver") or "")
    gpus, names = [], []
    for d in spec.get("devices") or []:
        if not isinstance(d, Mapping) or not d.get("name"):
            continue
        names.append(str(d["name"]))
        kind = _attr(d.get("attributes") or {}, driver, "type")
        if kind is None or str(kind) in DRA_GPU_DEVICE_TYPES:
            gpus.append(str(d["name"]))
    return SliceView(name=md.get("name") or "", driver=driver, pool=str((spec.get("pool") or {}).get("name") or ""),
                     node=spec.get("nodeName") or None, gpus=tuple(gpus), devices=tuple(names))


@dataclass(frozen=True, slots=True)
class ClaimView:
    """One ResourceClaim, as far as GPU accounting needs it.

    Attributes:
        namespace: ``metadata.namespace``.
        name: ``metadata.name``.
        pod: The Pod that owns it (a claim made from a pod's ResourceClaimTemplate), or None.
        node: The node its allocation is for (``status.allocation.nodeSelector`` pinning
            ``metadata.name``), or None.
        devices: ``(driver, pool, device)`` of every allocated device
            (``status.allocation.devices.results``); empty while unallocated.
        template: ``resource.kubernetes.io/pod-claim-name`` annotation (the pod's claim entry).
    """

    namespace: str
    name: str
    pod: str | None = None
    node: str | None = None
    devices: tuple[tuple[str, str, str], ...] = ()
    template: str | None = None

    @property
    def allocated(self) -> bool:
        return bool(self.devices)


def _pinned(selector: Mapping[str, Any] | None) -> str | None:
    for term in (selector or {}).get("nodeSelectorTerms") or []:
        for f in (term or {}).get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In" and len(f.get("values") or []) == 1:
                return str(f["values"][0])
    return None


def claim_from_k8s(body: Mapping[str, Any]) -> ClaimView:
    """A :class:`ClaimView` from a ResourceClaim (``resource.k8s.io/v1``)."""
    md = body.get("metadata") or {}
    alloc = (body.get("status") or {}).get("allocation") or {}
    owner = next((o.get("name") for o in md.get("ownerReferences") or []
                  if o.get("kind") == "Pod" and o.get("name")), None)
    results = ((alloc.get("devices") or {}).get("results")) or []
    devices = tuple((str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
                    for r in results if isinstance(r, Mapping))
    return ClaimView(namespace=md.get("namespace") or "", name=md.get("name") or "", pod=owner,
                     node=_pinned(alloc.get("nodeSelector")), devices=devices,
                     template=(md.get("annotations") or {}).get("resource.kubernetes.io/pod-claim-name"))


@dataclass(frozen=True)
class DeviceInventory:
    """What the ResourceSlices say: each driver's GPU devices per node, and where each
    ``(driver, pool)`` lives (a claim's results name pools, not nodes)."""

    gpus: Mapping[str, Mapping[str, frozenset[str]]]
    """driver -> node -> GPU device names."""
    pools: Mapping[tuple[str, str], str]
    """(driver, pool) -> node."""

    def count(self, driver: str) -> dict[str, int]:
        """GPUs of ``driver`` per node."""
        return {n: len(d) for n, d in (self.gpus.get(driver) or {}).items()}

    def node_of(self, driver: str, pool: str, fallback: str | None = None) -> str | None:
        return self.pools.get((driver, pool), fallback)

    def is_gpu(self, driver: str, node: str, device: str) -> bool:
        return device in ((self.gpus.get(driver) or {}).get(node) or ())


EMPTY_INVENTORY = DeviceInventory({}, {})


def inventory(slices: Iterable[SliceView]) -> DeviceInventory:
    """The :class:`DeviceInventory` of a set of node-local slices (slices without a node are
    left out: a GPU is always a node's)."""
    gpus: dict[str, dict[str, set[str]]] = {}
    pools: dict[tuple[str, str], str] = {}
    for s in slices:
        if s.node is None:
            continue
        gpus.setdefault(s.driver, {}).setdefault(s.node, set()).update(s.gpus)
        pools[(s.driver, s.pool)] = s.node
    return DeviceInventory({d: {n: frozenset(v) for n, v in by.items()} for d, by in gpus.items()}, pools)


def with_devices(nodes: Mapping[str, Any], inv: DeviceInventory) -> dict[str, Any]:
    """``nodes`` (name -> :class:`~kubeforge.objects.Node`) with each driver's GPU count under
    :func:`dra_key` in ``allocatable`` and ``capacity``; nodes without devices are returned as
    they are (the same objects)."""
    out = dict(nodes)
    extra: dict[str, dict[str, int]] = {}
    for driver, by_node in inv.gpus.items():
        for node, devs in by_node.items():
            extra.setdefault(node, {})[dra_key(driver)] = len(devs)
    for name, add in extra.items():
        n = out.get(name)
        if n is None:
            continue
        out[name] = replace(n, allocatable={**n.allocatable, **add}, capacity={**n.capacity, **add})
    return out


@dataclass(frozen=True, slots=True)
class ComputeDomainView:
    """One ComputeDomain (``resource.nvidia.com/v1beta1``) kubeforge made for a gang.

    Attributes:
        namespace: ``metadata.namespace``.
        name: ``metadata.name``.
        job: The TrainingJob it serves (label ``kubeforge.io/job-name``), or None.
        cliques: The cliques it was made for (annotation ``kubeforge.io/cliques``).
        channel_template: ``spec.channel.resourceClaimTemplate.name``.
        status: ``status.status`` (``Ready`` / ``NotReady``; NVIDIA's driver updates it only when
            ``numNodes`` is not 0).
        ready_nodes: Nodes whose IMEX daemon is Ready (``status.nodes[].status``).
        deleting: ``metadata.deletionTimestamp`` is set.
        finalizers: ``metadata.finalizers``.
    """

    namespace: str
    name: str
    job: str | None = None
    cliques: tuple[str, ...] = ()
    channel_template: str = ""
    status: str = nvidia.DOMAIN_NOT_READY
    ready_nodes: frozenset[str] = frozenset()
    deleting: bool = False
    finalizers: tuple[str, ...] = ()


def compute_domain_from_k8s(body: Mapping[str, Any], job_label: str = "kubeforge.io/job-name",
                            cliques_annotation: str = "kubeforge.io/cliques") -> ComputeDomainView:
    """A :class:`ComputeDomainView` from a ComputeDomain (its fields as
    :mod:`kubeforge.accelerators.nvidia` reads them)."""
    md = body.get("metadata") or {}
    cliques = (md.get("annotations") or {}).get(cliques_annotation) or ""
    return ComputeDomainView(
        namespace=md.get("namespace") or "", name=md.get("name") or "",
        job=(md.get("labels") or {}).get(job_label),
        cliques=tuple(c for c in cliques.split(",") if c),
        channel_template=nvidia.channel_template_of(body.get("spec")),
        status=nvidia.domain_status(body.get("status")),
        ready_nodes=nvidia.ready_daemon_nodes(body.get("status")),
        deleting=bool(md.get("deletionTimestamp")),
        finalizers=tuple(md.get("finalizers") or ()),
    )
