"""The peers' CRDs and webhook configurations, from their published module sources.

``hack/build-peers.sh`` copies each module's kustomize inputs (``config/.../crd/bases``,
``crd/patches``, ``webhook/manifests.yaml`` and its patches) from the Go module cache next to
the binaries. Here they become objects for the sim's API server the way the modules' own
``config/default`` kustomizations make them, with the one change the sim needs: every
``clientConfig.service`` (there is no Service routing in the sim) becomes
``clientConfig.url: https://127.0.0.1:<port><path>`` with the loopback CA as ``caBundle``.

Only two kinds of kustomize patch occur in these inputs and both are applied: RFC 6902 lists
(``add`` / ``replace`` at a JSON pointer, with a ``target``) and strategic merges of a webhook
configuration (webhooks matched by ``name``). Names get the prefix ``<peer>-`` as the
modules' ``namePrefix`` does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from ._build import PeersError

# Where each peer's inputs sit inside its module (see hack/build-peers.sh).
LAYOUT = {
    "kueue": {"crd": "config/components/crd", "webhook": "config/components/webhook"},
    "jobset": {"crd": "config/components/crd", "webhook": "config/components/webhook"},
    "lws": {"crd": "config/crd", "webhook": "config/webhook"},
}


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def _kustomize_patches(kdir: Path) -> Iterator[tuple[dict, Any]]:
    """``(target, patch)`` for each entry of ``kdir/kustomization.yaml``'s ``patches``."""
    kfile = kdir / "kustomization.yaml"
    if not kfile.exists():
        return
    for p in (yaml.safe_load(kfile.read_text()) or {}).get("patches") or []:
        if "patch" in p:
            body = yaml.safe_load(p["patch"])
        else:
            f = kdir / p["path"]
            if not f.exists():
                raise PeersError(f"{kfile} names {p['path']}, missing from the copied module sources")
            body = yaml.safe_load(f.read_text())
        yield p.get("target") or {}, body


def _pointer_set(doc: Any, pointer: str, value: Any, op: str) -> None:
    parts = [t.replace("~1", "/").replace("~0", "~") for t in pointer.lstrip("/").split("/")]
    for t in parts[:-1]:
        doc = doc[int(t)] if isinstance(doc, list) else doc.setdefault(t, {})
    last = parts[-1]
    if isinstance(doc, list):
        i = len(doc) if last == "-" else int(last)
        if op == "add":
            doc.insert(i, value)
        else:
            doc[i] = value
    else:
        doc[last] = value


def _apply_patch(doc: dict, target: dict, body: Any) -> None:
    """Apply one kustomize patch to ``doc`` when it targets it (kind and name)."""
    name = doc["metadata"]["name"]
    if isinstance(body, list):  # RFC 6902
        if target.get("kind", doc["kind"]) != doc["kind"] or target.get("name", name) != name:
            return
        for op in body:
            if op.get("op") not in ("add", "replace"):
                raise PeersError(f"unsupported JSON patch op {op.get('op')!r} for {doc['kind']} {name}")
            _pointer_set(doc, op["path"], copy.deepcopy(op["value"]), op["op"])
    elif isinstance(body, dict):  # strategic merge
        if body.get("kind") != doc["kind"] or (body.get("metadata") or {}).get("name") != name:
            return
        if doc["kind"].endswith("WebhookConfiguration"):
            by_name = {w["name"]: w for w in doc.get("webhooks") or []}
            for w in body.get("webhooks") or []:
                if w["name"] in by_name:
                    by_name[w["name"]].update({k: copy.deepcopy(v) for k, v in w.items() if k != "name"})
        else:  # a CRD patch: spec.conversion
            doc.setdefault("spec", {}).update(copy.deepcopy(body.get("spec") or {}))


def _client_config(cc: dict, base_url: str, ca_bundle: str) -> dict:
    path = (cc.get("service") or {}).get("path") or ""
    return {"url": base_url + path, "caBundle": ca_bundle}


def crds(bin_dir: Path, peer: str, base_url: str, ca_bundle: str) -> list[dict]:
    """The peer's CRDs, with the conversion webhooks its kustomization enables.

    Args:
        bin_dir: the built peers' directory (``manifests/<peer>/...`` inside).
        peer: ``kueue``, ``jobset`` or ``lws``.
        base_url: ``https://127.0.0.1:<webhook port>`` of the peer's manager.
        ca_bundle: base64 CA of the manager's serving certificate.

    Returns:
        CustomResourceDefinition objects, ready for ``kubectl apply --server-side``.
    """
    cdir = bin_dir / "manifests" / peer / LAYOUT[peer]["crd"]
    out = {d["metadata"]["name"]: d for f in sorted((cdir / "bases").glob("*.yaml")) for d in _docs(f)}
    for target, body in _kustomize_patches(cdir):
        for d in out.values():
            _apply_patch(d, target, body)
    for d in out.values():
        wh = ((d.get("spec") or {}).get("conversion") or {}).get("webhook")
        if wh and "clientConfig" in wh:
            wh["clientConfig"] = _client_config(wh["clientConfig"], base_url, ca_bundle)
    return list(out.values())


def webhook_configurations(bin_dir: Path, peer: str, base_url: str, ca_bundle: str,
                           keep: Callable[[dict], bool] = lambda w: True) -> list[dict]:
    """The peer's Mutating/ValidatingWebhookConfigurations, pointed at ``base_url``.

    Args:
        bin_dir, peer, base_url, ca_bundle: as for :func:`crds`.
        keep: which webhooks to keep (e.g. only those of the integrations a manager runs:
            a webhook whose handler is not served would fail every matching request).

    Returns:
        The configurations, named ``<peer>-<name>``.
    """
    wdir = bin_dir / "manifests" / peer / LAYOUT[peer]["webhook"]
    docs = [d for d in _docs(wdir / "manifests.yaml") if d.get("kind", "").endswith("WebhookConfiguration")]
    for target, body in _kustomize_patches(wdir):
        for d in docs:
            _apply_patch(d, target, body)
    for d in docs:
        d["metadata"] = {"name": f"{peer}-{d['metadata']['name']}", "labels": {"kubeforge.io/peer": peer}}
        d["webhooks"] = [w for w in d.get("webhooks") or [] if keep(w)]
        for w in d["webhooks"]:
            w["clientConfig"] = _client_config(w["clientConfig"], base_url, ca_bundle)
    return docs


def webhook_groups(w: dict) -> set[str]:
    """The API groups a webhook's rules match (``""`` is the core group)."""
    return {g for r in w.get("rules") or [] for g in r.get("apiGroups") or []}
