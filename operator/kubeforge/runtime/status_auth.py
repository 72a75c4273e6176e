"""Who is reporting: the bearer token checked with a TokenReview (cached, bounded), then the pod
it is bound to checked against the job, from this process's cache (no API call).

Costs, so that no sender can make the API server work for it: a token that cannot pass is
refused before any request (:func:`kubeforge.progress.precheck`); a verdict is cached by the
token's hash (an accepted token for up to :data:`CACHE_SECONDS` and never past its ``exp``, a
refused one for :data:`REFUSED_SECONDS`); the same token asked twice at once waits for one
review; and the reviews this process sends are a token bucket (:data:`REVIEWS_PER_SECOND`,
burst :data:`REVIEW_BURST`): beyond it, 429 with Retry-After. The ``Authorization`` header of an
accepted token is mapped to its cache key (at most :data:`KEY_ENTRIES`), so that a worker's
every report does not hash its ~1 KiB token again: the same header is the same token, and its
verdict, expiry and namespace are still read on every report. That map holds the accepted
tokens themselves (the verdict cache holds only their hashes): bearer tokens of the kubeforge
audience, bound to live pods, that this process reads on every request anyway; whoever can read
its memory holds its own ServiceAccount token, which can do far more. A token is cached long because
the pod's liveness is checked on every report from the cache: a pod that ends or leaves the
current attempt is refused at once, whatever its token's verdict.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections import OrderedDict
from typing import Any, Callable

from kubeforge.objects import Key, Pod, current_attempt, worker_pod_name
from kubeforge.progress import AuthError, Identity, TokenBucket, bearer, identity_from_review, precheck, review_body
from kubeforge.runtime.client import ApiError

CACHE_SECONDS = 300.0
"""How long an accepted token's verdict is kept (the Kubeflow SDK re-reads its token as often)."""
REFUSED_SECONDS = 10.0
"""How long a refused token's verdict is kept."""
CACHE_ENTRIES = 50_000
"""Verdicts kept at most (the least recently used go first)."""
KEY_ENTRIES = 10_000
"""``Authorization`` headers whose cache key is remembered at most (then all are forgotten:
each costs its hash once more). ~1.1 KiB each: about 11 MiB at most."""
REVIEWS_PER_SECOND = 50.0
"""TokenReviews this process sends per second at most, all jobs together."""
REVIEW_BURST = 200.0
"""... and at once (a restart of the operator finds every running job's token new: 1,000 jobs'
tokens are all verified within 20 s; the others meanwhile get 429 and report again later)."""
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


class Busy(Exception):
    """Too many TokenReviews for now: answer 429 with ``retry_after`` seconds."""

    def __init__(self, retry_after: float, message: str):
        super().__init__(message)
        self.retry_after = retry_after
        self.message = message


class Authenticator:
    """The TokenReview side, with its cache and its bound.

    Args:
        client: The operator's :class:`~kubeforge.runtime.client.KubeClient`.
        audience: The audience tokens must carry.
        wall: Unix seconds (token ``exp``, TokenReview freshness).
        clock: Monotonic seconds (cache ages, the bucket).
    """

    def __init__(self, client: Any, audience: str, wall: Callable[[], float] = time.time,
                 clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.audience = audience
        self.wall = wall
        self.clock = clock
        self.reviews = TokenBucket(REVIEWS_PER_SECOND, REVIEW_BURST)
        self._cache: OrderedDict[str, tuple[float, Identity | AuthError]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future] = {}
        self._keys: dict[str, str] = {}
        self.sent = 0

    async def identify(self, header: str | None, namespace: str) -> Identity:
        """The verified sender of a request to ``namespace``'s job.

        Raises:
            AuthError: 401 / 403 (see :mod:`kubeforge.progress`), or 503 when the API
                server cannot be asked now.
            Busy: the TokenReview bound is reached (429).
        """
        key = self._keys.get(header) if header else None  # a token seen before: no sha256 of its ~1 KiB
        token = None
        if key is None:
            token = bearer(header)
            key = token_key(token)
        now = self.clock()
        hit = self._cache.get(key)  # first: a known token costs a hash, not a JWT decode
        if hit is not None and hit[0] > now:
            self._cache.move_to_end(key)
            verdict = hit[1]
            if isinstance(verdict, AuthError):
                raise verdict
            if verdict.namespace != namespace:
                raise AuthError(403, f"the token belongs to namespace {verdict.namespace!r}, not {namespace!r}")
            if token is not None:
                self._remember_key(header, key)
            return verdict
        if token is None:
            token = bearer(header)
        claims = precheck(token, namespace, self.audience, self.wall())
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        wait = self.reviews.take(now)
        if wait > 0:
            raise Busy(wait, "too many new tokens to verify at once; retry later")
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            verdict = await self._review(key, token, namespace, float(claims.get("exp") or 0.0))
            fut.set_result(verdict)
            return verdict
        except AuthError as e:
            if e.code != 503:
                self._remember(key, e, REFUSED_SECONDS)
            fut.set_exception(e)
            raise
        finally:
            self._inflight.pop(key, None)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # retrieved: no "exception was never retrieved" when nobody else waited

    def _remember_key(self, header: str, key: str) -> None:
        """Remember the cache key of an accepted token's header: the same header (byte for byte)
        always has the same key, so this saves only the hash; the verdict is still read from the
        cache, with its expiry, on every report."""
        if len(self._keys) >= KEY_ENTRIES:
            self._keys.clear()
        self._keys[header] = key

    async def _review(self, key: str, token: str, namespace: str, exp: float) -> Identity:
        """Send the TokenReview and cache an accepted verdict (a refusal is cached by the caller)."""
        try:
            self.sent += 1
            body = await self.client.request("POST", TOKEN_REVIEWS, review_body(token, self.audience), read=True,
                                             resource="tokenreviews")
        except ApiError as e:
            raise AuthError(503, f"cannot verify the token now ({e.code} {e.reason}): retry later") from None
        who = identity_from_review((body or {}).get("status"), namespace, self.audience, exp)
        ttl = CACHE_SECONDS if not exp else min(CACHE_SECONDS, exp - self.wall())
        self._remember(key, who, max(0.0, ttl))
        return who

    def _remember(self, key: str, verdict: Identity | AuthError, ttl: float) -> None:
        if ttl <= 0:
            return
        self._cache[key] = (self.clock() + ttl, verdict)
        self._cache.move_to_end(key)
        while len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)


def token_key(token: str) -> str:
    """The verdict cache's key of a token: its sha256 (hex), so the verdict cache holds no token."""
    return hashlib.sha256(token.encode()).hexdigest()


def reporting_pod(pods: list[Pod], status: Any, job: Key, who: Identity) -> Pod:
    """The live pod of the job's current attempt that ``who`` is bound to.

    Args:
        pods: The job's pods, every attempt (the cache's).
        status: The job's status (its current attempt).
        job: ``(namespace, name)``.
        who: The verified sender.

    Raises:
        AuthError: 403 when the pod is not the job's, not of its current attempt, or has ended.
    """
    ns, name = job
    attempt = current_attempt(status)
    pod = next((p for p in pods if p.name == who.pod), None)
    if pod is None or pod.job != name or pod.name != worker_pod_name(name, pod.rank, pod.attempt):
        raise AuthError(403, f"pod {who.pod} is not a worker of TrainingJob {ns}/{name}")
    if pod.attempt != attempt:
        raise AuthError(403, f"pod {who.pod} belongs to attempt {pod.attempt}; TrainingJob {ns}/{name} "
                        f"runs attempt {attempt} (only its live pods may report)")
    if pod.terminal:
        raise AuthError(403, f"pod {who.pod} has ended ({pod.phase}); only live pods may report")
    return pod


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` header value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
