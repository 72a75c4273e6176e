"""The training bench's start breakdown from an audit log (e2e/bench/training/audit.py): the
Admitted step split at the API server's receipt of the operator's write."""

from __future__ import annotations

import json
from pathlib import Path

from e2e.bench.training.audit import breakdown, read_audit

NS = "bench-kubeforge"


def _event(verb: str, resource: str, name: str, stage: str, received: str | None = None, sub: str | None = None) -> str:
    ref = {"resource": resource, "namespace": NS, "name": name, **({"subresource": sub} if sub else {})}
    ev = {"verb": verb, "objectRef": ref, "responseStatus": {"code": 201 if verb == "create" else 200},
          "stageTimestamp": stage, "requestReceivedTimestamp": received or stage, "userAgent": "kubeforge"}
    return json.dumps(ev, separators=(",", ":"))  # as the API server writes it (read_audit greps the line)


def test_the_admitted_step_splits_at_the_api_servers_receipt_of_the_write(tmp_path: Path):
    log = tmp_path / "audit.log"
    log.write_text("\n".join([
        _event("create", "trainingjobs", "j", "2026-12-07T10:00:00.000000Z"),
        _event("patch", "trainingjobs", "j", "2026-12-07T10:00:03.500000Z", "2026-12-07T10:00:02.250000Z", sub="status"),
        _event("create", "pods", "j-worker-0-0", "2026-12-07T10:00:04.000000Z"),
        _event("patch", "trainingjobs", "j", "2026-12-07T10:00:09.000000Z", "2026-12-07T10:00:08.000000Z", sub="status"),
    ]) + "\n")
    tl = read_audit(log, NS)
    steps = dict(breakdown(tl, {"j": 1})["steps"])
    assert steps["created -> Admitted"] == [3.5]                    # the last status write before the first pod
    assert steps["  created -> Admitted write received"] == [2.25]  # watch, decision, queue: before the API server has it
    assert steps["  Admitted write: received -> answered"] == [1.25]  # the API server's own handling
    assert steps["Admitted -> all pods created"] == [0.5]
