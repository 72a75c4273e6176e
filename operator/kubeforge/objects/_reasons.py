"""Condition and Event reasons that more than one layer reads: one constant each, used by
name (decisions compare these constants, never message text)."""

INVALID_SPEC = "InvalidSpec"
"""``Admitted=False`` (and Ready=False): the models or the API server refused something only an
edit of the spec can fix. Admission waits for the spec to change."""

UNSCHEDULABLE_TEMPLATE = "UnschedulableTemplate"
"""``Admitted=False``: kube-scheduler will not bind a worker on the node it was given and the
job's own template explains why (its requests, node constraints, tolerations, or its required
inter-pod affinity / spread constraints). The GPUs are released at once, no startup retry is
counted, and admission waits for the spec to change: placing it again would fail the same way."""

PLACEMENT_LOST = "PlacementLost"
"""``Admitted=False``: a worker could not start on its node for a reason outside the job's own
spec (something else took the GPUs, the kubelet refused it): a startup failure, retried with
backoff."""

NAMESPACE_TERMINATING = "NamespaceTerminating"
"""``Admitted=False``: the namespace is being deleted; nothing more is created or restarted and
no preemption is counted."""

BLOCKED_UNTIL_SPEC_CHANGES = (INVALID_SPEC, UNSCHEDULABLE_TEMPLATE)
"""``Admitted=False`` reasons, at the job's current generation, that stop admission until the
spec changes."""
