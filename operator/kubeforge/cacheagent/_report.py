"""The ModelCacheNode status the agent writes: one entry a copy (Pending, Downloading n %,
Ready, Failed with a reason), the bytes used, the Ready count and the DiskFull condition. Plain
dicts in the API's camelCase (:class:`kubeforge.api.ModelCacheNodeStatus`), built from what the
agent holds; no I/O, ``now`` is a parameter."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from kubeforge.modelcache import DOWNLOADING, FAILED, PENDING, READY

MAX_MESSAGE = 1024
MAX_MODELS = 64  # ModelCacheNodeStatus.models holds at most this many (kubeforge.api)
MAX_REASON = 64


def rfc3339(unix: float) -> str:
    """``2026-11-27T00:20:12Z`` of Unix seconds (what metav1.Time accepts)."""
    return datetime.fromtimestamp(unix, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Copy:
    """One copy as the agent last saw it.

    Attributes:
        key: The copy's key.
        uri: Its source.
        phase: Pending, Downloading, Ready or Failed.
        bytes: Bytes on disk (done so far while Downloading).
        size_bytes: Expected size, or None.
        digest: The digest verified, or None.
        reason: CamelCase reason of a failure.
        message: What failed (never a secret).
        ready_at: Unix seconds it was verified.
        last_used: Unix seconds the spec last wanted it.
    """

    key: str
    uri: str
    phase: str = PENDING
    bytes: int = 0
    size_bytes: int | None = None
    digest: str | None = None
    reason: str | None = None
    message: str | None = None
    ready_at: float | None = None
    last_used: float | None = None

    @property
    def percent(self) -> int:
        """Progress, 0-100: 100 when Ready, else bytes over the expected size (at most 99)."""
        if self.phase == READY:
            return 100
        if not self.size_bytes:
            return 0
        return max(0, min(99, self.bytes * 100 // self.size_bytes))

    def failed(self, reason: str, message: str) -> "Copy":
        """This copy Failed with ``reason`` and ``message``."""
        return replace(self, phase=FAILED, reason=reason[:MAX_REASON], message=message[:MAX_MESSAGE])

    def to_status(self) -> dict[str, Any]:
        """Its :class:`~kubeforge.api.NodeCopy` as a dict (None fields left out)."""
        out: dict[str, Any] = {"key": self.key, "uri": self.uri, "phase": self.phase,
                               "progressPercent": self.percent, "bytes": self.bytes}
        for name, value in (("sizeBytes", self.size_bytes), ("digest", self.digest), ("reason", self.reason),
                            ("message", self.message)):
            if value is not None:
                out[name] = value
        if self.ready_at is not None:
            out["readyAt"] = rfc3339(self.ready_at)
        if self.last_used is not None:
            out["lastUsed"] = rfc3339(self.last_used)
        return out


def node_status(copies: Iterable[Copy], *, generation: int | None, agent: str, now: float,
                previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ModelCacheNode ``status``: the copies in the order given, usedBytes (the Ready
    copies), the Ready count, the heartbeat and the ``Ready`` condition (False with DiskFull when a
    wanted copy cannot fit, its lastTransitionTime kept from ``previous`` while unchanged)."""
    copies = list(copies)[:MAX_MODELS]  # the wanted copies come first; the CRD holds 64
    full = [c for c in copies if c.phase == FAILED and c.reason == "DiskFull"]
    cond_status, reason = ("False", "DiskFull") if full else ("True", "Fits")
    message = (f"{len(full)} wanted cop{'y' if len(full) == 1 else 'ies'} cannot fit, e.g. {full[0].key}"
               if full else "every wanted copy fits")
    last = next((c for c in (previous or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    since = last["lastTransitionTime"] if last and last.get("status") == cond_status else rfc3339(now)
    status: dict[str, Any] = {
        "models": [c.to_status() for c in copies],
        "usedBytes": sum(c.bytes for c in copies if c.phase == READY),
        "ready": sum(1 for c in copies if c.phase == READY),
        "agent": agent[:253],
        "heartbeat": rfc3339(now),
        "conditions": [{"type": "Ready", "status": cond_status, "reason": reason, "message": message,
                        "lastTransitionTime": since}],
    }
    if generation is not None:
        status["observedGeneration"] = generation
        status["conditions"][0]["observedGeneration"] = generation
    return status


def downloading(copy: Copy, done: int) -> Copy:
    """``copy`` Downloading with ``done`` bytes so far."""
    return replace(copy, phase=DOWNLOADING, bytes=done, reason=None, message=None)
