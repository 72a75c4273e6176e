"""Who sent a report: a projected ServiceAccount token, read before and after its TokenReview.

Two steps, both pure here (the runtime sends the TokenReview and caches it):

1. :func:`precheck` reads the token's claims WITHOUT verifying its signature, only to refuse
   at no cost what can never pass: not a JWT, another audience, another namespace than the
   URL's, no pod bound, expired. A forged token that passes this costs one TokenReview (bounded
   and cached by the runtime), never a status write.
2. :func:`identity_from_review` reads the API server's verdict
   (``authentication.k8s.io/v1`` TokenReview ``status``): authenticated, for the audience
   asked, a ServiceAccount of the URL's namespace, bound to a pod (the
   ``authentication.kubernetes.io/pod-name`` and ``pod-uid`` extras, which the API server sets
   from the token's ``kubernetes.io`` claim once it has checked that the pod still exists with
   that uid). Only this verified pod name is used afterwards.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Mapping

POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
"""The TokenReview ``user.extra`` key of the pod a token is bound to."""
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
"""The TokenReview ``user.extra`` key of that pod's uid."""
SA_PREFIX = "system:serviceaccount:"


class AuthError(Exception):
    """A report's sender could not be accepted.

    Attributes:
        code: 401 (no or bad token) or 403 (a valid token that may not report for this job).
        message: Why, in one line (never the token).
    """

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Identity:
    """The verified sender of a report.

    Attributes:
        namespace: The ServiceAccount's (and the pod's) namespace.
        service_account: The ServiceAccount's name.
        pod: The pod the token is bound to.
        pod_uid: That pod's uid ("" when the API server did not say).
        expires: The token's ``exp`` (unix seconds), 0 when unknown.
    """

    namespace: str
    service_account: str
    pod: str
    pod_uid: str = ""
    expires: float = 0.0


def bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header.

    Raises:
        AuthError: 401 when the header is missing or not a bearer token.
    """
    if not header:
        raise AuthError(401, "no Authorization header: send the projected token as 'Authorization: Bearer <token>'")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthError(401, "the Authorization header must be 'Bearer <token>'")
    if len(token) > 16384:
        raise AuthError(401, "the bearer token is too long")
    return token


def unverified_claims(token: str) -> dict[str, Any] | None:
    """The JWT's payload, decoded but NOT verified; None when it is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return claims if isinstance(claims, dict) else None


def precheck(token: str, namespace: str, audience: str, now: float) -> dict[str, Any]:
    """Refuse without asking the API server what no TokenReview could accept.

    Args:
        token: The bearer token.
        namespace: The namespace in the URL (the job's).
        audience: The audience the token must carry.
        now: Unix seconds.

    Returns:
        The (unverified) claims.

    Raises:
        AuthError: 401 not a JWT, another audience, expired, or not bound to a pod; 403 a
            token of another namespace.
    """
    claims = unverified_claims(token)
    if claims is None:
        raise AuthError(401, "the bearer token is not a JWT (use the projected token file, not its path)")
    aud = claims.get("aud")
    auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if audience not in auds:
        raise AuthError(401, f"the token's audience is not {audience!r}: use the projected token "
                        "kubeforge mounts (KUBEFORGE_STATUS_TOKEN), not the pod's default token")
    exp = claims.get("exp")
    if isinstance(exp, (int, float)) and exp <= now:
        raise AuthError(401, "the token has expired (the kubelet renews the projected file: read it again)")
    k8s = claims.get("kubernetes.io")
    if not isinstance(k8s, Mapping) or not isinstance(k8s.get("pod"), Mapping):
        raise AuthError(401, "the token is not bound to a pod")
    if k8s.get("namespace") != namespace:
        raise AuthError(403, f"the token belongs to namespace {k8s.get('namespace')!r}, not {namespace!r}")
    return claims


def review_body(token: str, audience: str) -> dict[str, Any]:
    """The ``authentication.k8s.io/v1`` TokenReview to create for ``token``."""
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token, "audiences": [audience]}}


def identity_from_review(status: Mapping[str, Any] | None, namespace: str, audience: str,
                         expires: float = 0.0) -> Identity:
    """The sender, from a TokenReview's ``status``.

    Args:
        status: The TokenReview's ``status``.
        namespace: The namespace in the URL.
        audience: The audience asked for.
        expires: The token's ``exp`` claim (kept for the cache), 0 when unknown.

    Raises:
        AuthError: 401 not authenticated (the message is the API server's error, if any) or
            not for the audience; 403 not a ServiceAccount of ``namespace``, or not bound to a pod.
    """
    st = status or {}
    if not st.get("authenticated"):
        why = str(st.get("error") or "the API server did not authenticate it")[:200]
        raise AuthError(401, f"token refused: {why}")
    auds = st.get("audiences")
    if auds is not None and audience not in auds:
        raise AuthError(401, f"the token is not valid for the audience {audience!r}")
    user = st.get("user") or {}
    username = str(user.get("username") or "")
    if not username.startswith(SA_PREFIX):
        raise AuthError(403, f"{username or 'the sender'} is not a ServiceAccount")
    sa_ns, _, sa = username[len(SA_PREFIX):].partition(":")
    if sa_ns != namespace:
        raise AuthError(403, f"ServiceAccount {sa_ns}/{sa} may not report for namespace {namespace}")
    extra = user.get("extra") or {}
    pods = extra.get(POD_NAME_EXTRA) or []
    if not pods:
        raise AuthError(403, "the token is not bound to a pod (create it for the pod: a projected volume)")
    uids = extra.get(POD_UID_EXTRA) or [""]
    return Identity(namespace=sa_ns, service_account=sa, pod=str(pods[0]), pod_uid=str(uids[0]), expires=expires)
