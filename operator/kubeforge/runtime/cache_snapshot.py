"""The admission snapshot of :class:`kubeforge.runtime.cache.Cache`: everything one admission
round reads, made from the indexes and this process's memory (Kueue's ``*_snapshot.go``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kubeforge.admission import JobView, Snapshot
from kubeforge.objects import Key, TrainingJobRecord, inventory, placement_of
from kubeforge.runtime.cache_assumptions import Assumptions
from kubeforge.runtime.cache_handoffs import HandOffs
from kubeforge.runtime.cache_keys import service_key
from kubeforge.runtime.cache_overlay import StatusOverlay
from kubeforge.runtime.cache_reader import IndexReader


@dataclass
class Snapshotter:
    """Makes each admission round's :class:`~kubeforge.admission.Snapshot`.

    Invariants:

    - A job's status is the effective one (our own last write until the index shows it), and
      its assumed placement counts only while that status has none (the status wins; the
      assumption is dropped then: :meth:`Assumptions.unless_placed
      <kubeforge.runtime.cache_assumptions.Assumptions.unless_placed>`).
    - A job's :class:`~kubeforge.admission.JobView` is reused, the same object, while neither
      the index's record, our own last write nor the assumed placement changed (every round
      asks for every job); a snapshot keeps the views of the jobs it holds and drops the rest.
    - A service's status is the effective one, read under :func:`service_key`.
    - Assumed groups and nominations past their time are left out (expired groups are
      dropped); every victim with a stop request is ``preempting``.

    Attributes:
        reader: The indexes.
        overlay: Our own last status writes.
        assumptions: Assumed placements and groups.
        handoffs: Nominations and stop requests.
    """

    reader: IndexReader
    overlay: StatusOverlay
    assumptions: Assumptions
    handoffs: HandOffs
    _views: dict[Key, JobView] = field(default_factory=dict)

    def job_view(self, rec: TrainingJobRecord) -> JobView:
        """The job as admission sees it (reused while nothing it shows changed)."""
        eff = self.overlay.effective(rec.key, rec)
        assumed = self.assumptions.unless_placed(rec.key, placement_of(eff.status) is not None)
        hit = self._views.get(rec.key)
        if hit is not None and hit.record is eff and hit.assumed is assumed:
            return hit
        view = JobView(eff, eff.status, assumed)
        self._views[rec.key] = view
        return view

    def forget(self, key: Key) -> None:
        """Drop the view of ``key`` (the job was deleted)."""
        self._views.pop(key, None)

    def snapshot(self) -> Snapshot:
        """Everything an admission round reads, from the indexes and this process's memory."""
        r = self.reader
        pods = r.node_pods()
        groups = self.assumptions.live_groups()
        jobs = {rec.key: self.job_view(rec) for rec in r.jobs()}
        self._views = dict(jobs)  # drop the views of jobs that are gone
        return Snapshot(
            pools=r.pools(),
            nodes=r.nodes(),
            pods=pods,
            jobs=jobs,
            services={k: self.overlay.effective(service_key(k), v) for k, v in r.services().items()},  # type: ignore[misc]
            storage_classes=r.storage_classes(),
            nominations=self.handoffs.nominations(),
            preempting=self.handoffs.preempting(),
            claims=r.claim_phases(),
            terminating=r.terminating_namespaces(),
            assumed_groups=groups,
            devices=inventory(r.slices()),
            resource_claims=r.resource_claims(),
            device_classes=r.device_classes(),
            model_caches=r.model_caches(),
        )
