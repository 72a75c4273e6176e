"""Shared pieces of the builders: owner references.

Everything here is pure: dicts in, dicts out. Label and annotation names, conditions and
timestamps live in :mod:`kubeforge.objects` (the deciding layers use them too).
"""

from __future__ import annotations

from typing import Any

from kubeforge import API_VERSION


def owner_reference(kind: str, name: str, uid: str, controller: bool = True) -> dict[str, Any]:
    """An ownerReference to one of our objects (so the garbage collector deletes the child
    with it). ``blockOwnerDeletion`` lets foreground deletion of the owner wait for it."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }
