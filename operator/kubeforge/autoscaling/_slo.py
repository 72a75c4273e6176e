"""SLO mode's two pure parts: the replicas the queue model asks for, and the ``SLOMet`` outcome."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from . import _reasons as R
from ._policy import SLOPolicy
from ._queue_model import MAX_SERVERS, fit_itl, itl_concurrency, replicas_for_wait, update_itl_fit, wait_quantile
from ._signals import Signals
from ._state import AutoscalerState

__all__ = ["CAP_RISE_SECONDS", "KV_USAGE_MIN", "KV_USAGE_TRUSTED", "SLOSizing", "SLOStatus", "size_for_slo", "slo_status"]

#: Least mean KV-cache usage from which ``running / usage`` estimates what a replica holds:
#: below it the ratio magnifies noise (a replica running one short request).
KV_USAGE_MIN = 0.05
#: Least mean KV-cache usage from which ``running / usage`` also raises the remembered cap:
#: half the cache, so the ratio averages at least half a cache's worth of requests. Measured on
#: the autoscaling bench's ``--runs day --seed 3`` (2026-11-28): per-replica estimates at
#: 0.05-0.15 usage spread 4.3-45, at >= 0.5 6.9-18.9, around the same median (12).
KV_USAGE_TRUSTED = 0.5
#: Time constant, s, of the cap's rise toward a higher trusted KV estimate: one 5 s poll moves
#: it by 1 - exp(-5/120) = 4 % of the gap, two minutes of such polls by 63 %, so one noisy
#: estimate cannot lift it. Chosen on the bench (2026-11-28): raised at once (0 s), the trace's
#: default point fell from 96.6 % to 95.2 % attainment; 120, 300, 600 s leave it at 96.6 %, and
#: the seed-3 day (``--cold-start 30``, at commit 5721813) cost 5,307 replica-minutes at 120 s,
#: 6,133 at 600 s, 8,568 without the rise.
CAP_RISE_SECONDS = 120.0
#: Longest gap, in windows, over which the queue's growth since the last decision is trusted.
_GROWTH_MAX_WINDOWS = 1.0


def _num(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "unbounded "


@dataclass(frozen=True)
class SLOSizing:
    """What the queue model asks for in one decision, and the numbers behind it.

    Attributes:
        needed: Replicas asked for (0 with no demand; ``max_replicas + 1`` when even
            ``max_replicas`` cannot meet the targets), or ``None`` when the model lacks data
            (no request ever ran: nothing measured the service time or a replica's capacity).
        arrival_rate: Requests per second the model sizes for: the measured demand plus the
            queue spread over one window (its backlog).
        service_seconds: Mean time a request runs, s (measured, or the last one measured).
        concurrency: Requests one replica runs at once (from KV-cache usage, capped by what
            was seen running on a queueing replica), the M/M/c servers per replica.
        itl_concurrency: Most running requests per replica that keep the ITL target (``None``:
            no bound known, or no ITL target).
        wait_budget: TTFT target minus the prefill percentile, s (``None`` without TTFT target).
        predicted_ttft: The model's TTFT percentile at ``needed`` replicas (wait + prefill), s.
        breach: Whether ``needed`` was raised to ``current + 1`` because the measured TTFT is
            above target while requests queue and no replica is starting (the model
            under-estimated).
        message: One sentence with these numbers.
        state: The state with this decision's measurements remembered.
        held: Whether ``needed`` holds the current count (no replica capacity measured yet)
            rather than counting for the demand: predictive scale-up does not grow it.
    """

    needed: int | None
    arrival_rate: float | None
    service_seconds: float | None
    concurrency: float | None
    itl_concurrency: float | None
    wait_budget: float | None
    predicted_ttft: float | None
    breach: bool
    message: str
    state: AutoscalerState
    held: bool = False


@dataclass(frozen=True)
class _Measured:
    """Steps 1 to 3 of :func:`size_for_slo`: what the model sizes with, from one poll and the
    carried state.

    Attributes:
        q: The percentile as a quantile, in (0, 1).
        queued: Requests waiting (engines' + activator's held).
        lam: Arrival rate, requests/s (demand plus the backlog over one window).
        s: Mean time a request runs, s, or None (never measured).
        prefill: The prefill percentile, s, or None.
        per_replica: Requests running per reporting replica now, or None.
        k: Requests one replica runs at once (M/M/c servers per replica), or None.
        k_itl: Most running requests per replica that keep the ITL target, or None.
        budget: TTFT target minus the prefill percentile, s (None without a TTFT target).
        state: The carried state with this poll's measurements remembered.
    """

    q: float
    queued: float
    lam: float
    s: float | None
    prefill: float | None
    per_replica: float | None
    k: float | None
    k_itl: float | None
    budget: float | None
    state: AutoscalerState


def _arrival_rate(slo: SLOPolicy, signals: Signals, state: AutoscalerState, now: float) -> tuple[float, float]:
    """Step 1, demand: ``(lambda, queued)``. What the replicas admit now (``irate``, else the
    window's ``rate``) plus the queue's growth since the last decision (trusted over at most
    one window), plus the backlog (engines' waiting + the activator's held) over one window."""
    v = signals.value
    queued = signals.queued or 0.0
    growth = None
    if state.queue_sample is not None:
        t0, q0 = state.queue_sample
        if 0 < now - t0 <= _GROWTH_MAX_WINDOWS * slo.window_seconds:
            growth = (queued - q0) / (now - t0)
    steady = v("admission_rate") or 0.0
    recent = v("admission_rate_recent")
    # what the replicas admit now plus what they did not keep up with since the last decision
    demand = max(0.0, (recent if recent is not None else steady) + (growth or 0.0))
    return demand + queued / slo.window_seconds, queued


def _service_time(signals: Signals, state: AutoscalerState) -> tuple[float | None, float | None]:
    """Step 2: ``(S, prefill)``. ``S`` by Little's law over the window (mean running requests /
    admission rate), else the finished requests' mean running time, else the last measured;
    the prefill percentile, else the last measured."""
    v = signals.value
    steady = v("admission_rate") or 0.0
    steady_rm = v("running_mean")
    if steady_rm and steady > 0:
        s = steady_rm / steady  # Little's law over the window: running requests / admission rate
    else:
        s = v("service_seconds") or state.service_seconds
    prefill = v("prefill") if v("prefill") is not None else state.prefill_seconds
    return s, prefill


def _concurrency(signals: Signals, state: AutoscalerState,
                 now: float) -> tuple[float | None, float | None, float | None]:
    """Step 3: ``(k, k_cap, per_replica)``. ``k`` is ``running per replica / KV usage`` (what a
    replica holds when its KV cache is full; only from :data:`KV_USAGE_MIN` usage), capped by
    ``k_cap``, the most requests seen running on a replica that queues (remembered, a maximum).

    A remembered cap also rises toward the KV estimate when that is higher, measured at
    :data:`KV_USAGE_TRUSTED` usage or more while no replica queues, with time constant
    :data:`CAP_RISE_SECONDS` (the time since the last SLO decision, at most one window).
    Without that a cap measured once low (one replica full of long prompts) was never raised:
    a service sized from it is over-provisioned, so no replica queues again (issue 28's seed-3
    day at commit 5721813: 5 per replica all day against a KV estimate of 12, 2x the
    replica-minutes). A replica queueing in the same poll measures the limit directly (and
    ``--max-num-seqs`` binding before the KV cache shows there, not in the usage). The KV
    estimate does not set a cap where none was seen, nor is it remembered below that usage:
    one measured at 5-10 % usage is noisy, and sizing a lull with a high one scaled the
    autoscaling bench's trace down before its bursts (TTFT attainment 96.6 % -> 90.9 % at the
    same cost); below :data:`KV_USAGE_MIN` the count is held (:func:`_unmeasured_capacity`)."""
    v = signals.value
    replicas = v("replicas") or 0.0
    running = v("running")
    per_replica = running / replicas if running is not None and replicas >= 1 else None  # a count: below 1 is noise
    seen = v("saturated_running")
    kv = v("kv_cache_usage")
    k_kv = per_replica / kv if per_replica and kv is not None and kv >= KV_USAGE_MIN else None
    cap = state.concurrency
    if cap and k_kv and k_kv > cap and not seen and kv is not None and kv >= KV_USAGE_TRUSTED:
        last = state.queue_sample[0] if state.queue_sample is not None else now
        dt = min(max(now - last, 0.0), signals.window_seconds or 0.0)
        cap += (k_kv - cap) * -math.expm1(-dt / CAP_RISE_SECONDS)
    k_cap = max(x for x in (seen, cap) if x) if (seen or cap) else None
    k = min(k_kv, k_cap) if k_kv and k_cap else (k_kv or k_cap)
    return k, k_cap, per_replica


def _measure(slo: SLOPolicy, signals: Signals, state: AutoscalerState, now: float) -> _Measured:
    """Steps 1 to 3 (:func:`_arrival_rate`, :func:`_service_time`, :func:`_concurrency`), the
    linear ITL fit updated with this poll's ITL at this poll's running per replica, and the
    ITL bound and TTFT wait budget the counts need; the state remembers the measurements."""
    lam, queued = _arrival_rate(slo, signals, state, now)
    s, prefill = _service_time(signals, state)
    k, k_cap, per_replica = _concurrency(signals, state, now)
    fit_sums, fit_time = state.itl_fit, state.itl_fit_time
    itl = signals.value("itl")
    if per_replica is not None and itl is not None and itl > 0:
        fit_sums, fit_time = update_itl_fit(state.itl_fit, state.itl_fit_time, now, per_replica, itl), now
    new_state = replace(state, queue_sample=(float(now), float(queued)), service_seconds=s,
                        prefill_seconds=prefill, concurrency=k_cap, itl_fit=fit_sums, itl_fit_time=fit_time)
    k_itl = None
    if slo.itl_seconds is not None:
        k_itl = itl_concurrency(slo.itl_seconds, fit_itl(fit_sums), per_replica, itl)
    budget = None if slo.ttft_seconds is None else slo.ttft_seconds - (prefill or 0.0)
    return _Measured(slo.percentile / 100.0, queued, lam, s, prefill, per_replica, k, k_itl, budget, new_state)


def _count(slo: SLOPolicy, m: _Measured, rate: float, max_replicas: int) -> int:
    """Steps 4 and 5 at arrival ``rate``: the fewest replicas whose M/M/c wait quantile fits the
    TTFT budget, and at least ``ceil(rate * S / k_itl)`` for the ITL target (``max_replicas +
    1`` when even ``max_replicas`` cannot)."""
    assert m.s
    n = 1
    if slo.ttft_seconds is not None and m.k is not None:
        n_ttft = replicas_for_wait(rate, m.s, m.k, m.budget or 0.0, m.q, max_replicas)
        n = max_replicas + 1 if n_ttft is None else max(n, n_ttft)
    if m.k_itl is not None:
        need = rate * m.s / m.k_itl if m.k_itl > 0 else math.inf
        n = max(n, math.ceil(need - 1e-9) if need <= max_replicas else max_replicas + 1)  # inf: a tiny k_itl
    return n


def _within_tolerance(slo: SLOPolicy, m: _Measured, current: int, max_replicas: int,
                      tolerance: float) -> tuple[int, bool]:
    """Steps 4 to 6: ``(needed, banded)``, the count at ``lambda``, or ``current`` (banded) when
    it lies between the counts at ``lambda * (1 - tolerance)`` and ``lambda * (1 + tolerance)``."""
    needed = _count(slo, m, m.lam, max_replicas)
    if (tolerance > 0 and needed != current
            and _count(slo, m, m.lam * (1 - tolerance), max_replicas) <= current
            <= _count(slo, m, m.lam * (1 + tolerance), max_replicas)):
        return current, True
    return needed, False


def _feedback(slo: SLOPolicy, signals: Signals, state: AutoscalerState, m: _Measured, needed: int, current: int,
              now: float) -> tuple[int, bool, AutoscalerState]:
    """Step 7: ``(needed, breach, state)``. The measured TTFT above target with requests queued,
    a positive budget, every replica asked for reporting and the model asking for no more than
    ``current`` raise ``needed`` to ``current + 1``, at most once per window (remembered)."""
    ttft, last = signals.value("ttft"), state.breach_time
    replicas = signals.value("replicas") or 0.0
    if (slo.ttft_seconds is not None and ttft is not None and ttft > slo.ttft_seconds and m.queued > 0
            and (m.budget or 0) > 0 and needed <= current and replicas >= current
            and (last is None or now - last >= slo.window_seconds)):
        return current + 1, True, replace(m.state, breach_time=float(now))
    return needed, False, m.state


def _message(slo: SLOPolicy, m: _Measured, needed: int, banded: bool, tolerance: float, predicted: float | None,
             breach: bool, ttft: float | None, current: int) -> str:
    """The sentence of one sizing: arrivals x running time, the per-replica capacities, the
    count, the tolerance band, the predicted TTFT, the measured breach."""
    assert m.s is not None
    parts = [f"arrivals {_num(m.lam)}/s x {_num(m.s)}s running = {_num(m.lam * m.s)} requests in service"]
    if m.k is not None:
        parts.append(f"{_num(m.k)} per replica")
    if m.k_itl is not None:
        parts.append(f"at most {_num(m.k_itl)} per replica for the ITL target")
    msg = ", ".join(parts) + f": the queue model needs {needed}"
    if banded:
        msg += f" (within the {tolerance * 100:g}% tolerance on arrivals)"
    if predicted is not None:
        msg += f" (predicted p{slo.percentile:g} TTFT {_num(predicted)}s)"
    if breach:
        msg += (f"; measured p{slo.percentile:g} TTFT {_num(ttft)}s above target with requests queued: "
                f"at least {current + 1}")
    return msg


def size_for_slo(slo: SLOPolicy, signals: Signals, state: AutoscalerState, current: int, max_replicas: int,
                 now: float, tolerance: float = 0.0) -> SLOSizing:
    """The replicas the SLO needs, from the M/M/c model (:mod:`kubeforge.autoscaling._queue_model`).

    1. **Demand** ``lambda``: what the replicas admit now (``irate`` of the admissions, the
       window's ``rate`` when there is none) plus the queue's growth since the last
       decision: by conservation ``arrivals = admitted + change in queue``. Both terms are
       recent, so a burst or a cold ramp is measured within one polling interval (Knative
       KPA's short panic window, here always on); the noise of a short window is absorbed by
       the tolerance below and by the scale-down window, which keeps the highest
       recommendation of the last minutes (a service sized for its recent peaks). Plus the
       backlog (engines' waiting + the activator's held) spread over one window.
    2. **Service time** ``S`` (mean time a request runs): Little's law over the window, mean
       running requests / admission rate, which counts the requests still running (the mean
       of the finished ones lags while a ramp fills the batch); else the finished requests'
       mean running time; else the last measured (state). **Prefill** percentile: measured,
       else the last measured.
    3. **Concurrency per replica** ``k``: ``running per replica / KV usage`` (what a replica
       holds when its KV cache is full), capped by the most requests seen running on a
       replica that queues (``saturated_running``, remembered: ``--max-num-seqs`` when that
       binds first); a remembered cap below the KV estimate rises toward it, with time
       constant :data:`CAP_RISE_SECONDS`, in polls at :data:`KV_USAGE_TRUSTED` usage or more
       where no replica queues (a cap measured once low is corrected).
    4. **TTFT**: the fewest replicas whose M/M/c wait quantile fits ``ttft - prefill``.
    5. **ITL**: ``ceil(lambda * S / k_itl)`` with ``k_itl`` from the linear ITL fit.
    6. **Tolerance** (the HPA's, on the arrival rate): when ``current`` lies between the
       counts needed at ``lambda * (1 - tolerance)`` and ``lambda * (1 + tolerance)``, it is
       kept, so that noise in the measured rate neither adds a replica nor removes one.
    7. **Feedback**: measured TTFT above target with requests queued, once every replica
       asked for reports (none is starting), asks for at least ``current + 1``, at most once
       per window (the measured percentile needs a window to show the last correction).

    Args:
        slo: The targets.
        signals: This poll's signals.
        state: The carried state (its SLO memory is read and updated).
        current: Replicas now.
        max_replicas: ``maxReplicas`` (the search stops there).
        now: Unix seconds.
        tolerance: The relative band on the arrival rate (``autoscaling.tolerance``) >= 0.

    Returns:
        The :class:`SLOSizing`.
    """
    m = _measure(slo, signals, state, now)
    if m.lam <= 0:
        return SLOSizing(0, m.lam, m.s, m.k, m.k_itl, m.budget, None, False,
                         "no requests arrive or wait: no replica needed for the SLO", m.state)
    if m.s and m.k is None and slo.ttft_seconds is not None:
        return _unmeasured_capacity(slo, m, current, max_replicas)
    if not m.s or (m.k is None and m.k_itl is None):
        return SLOSizing(None, m.lam, m.s, m.k, m.k_itl, m.budget, None, False,
                         f"arrivals {_num(m.lam)}/s but no service time or replica capacity measured yet", m.state)
    needed, banded = _within_tolerance(slo, m, current, max_replicas, tolerance)
    predicted = None
    if m.k is not None and needed <= max_replicas:
        c = max(1, int(math.floor(min(needed * m.k, MAX_SERVERS) + 1e-9)))
        predicted = wait_quantile(c, m.lam * m.s, m.s, m.q) + (m.prefill or 0.0)
    needed, breach, new_state = _feedback(slo, signals, state, m, needed, current, now)
    msg = _message(slo, m, needed, banded, tolerance, predicted, breach, signals.value("ttft"), current)
    return SLOSizing(needed, m.lam, m.s, m.k, m.k_itl, m.budget, predicted, breach, msg, new_state)


def _unmeasured_capacity(slo: SLOPolicy, m: _Measured, current: int, max_replicas: int) -> SLOSizing:
    """No replica's capacity measured yet (no KV usage of :data:`KV_USAGE_MIN`, no replica that
    queued): the count is held, but never above what the SLO needs **even if each replica ran
    one request at a time** (``k = 1``, the least any engine runs: an upper bound on the replicas
    needed). So an idle, over-provisioned service comes down to that bound instead of holding
    its count until a load it never sees measures the capacity; nothing is added on a guess,
    but a service at zero with demand gets one replica (which then measures), as before."""
    bound_m = replace(m, k=1.0, k_itl=None)
    bound = _count(slo, bound_m, m.lam, max_replicas)
    needed = min(max(current, 1), bound)
    msg = (f"arrivals {_num(m.lam)}/s x {_num(m.s)}s running but no replica capacity measured yet: "
           f"holding {current} replicas, at most {bound} even at one request per replica: {needed}")
    return SLOSizing(needed, m.lam, m.s, None, m.k_itl, m.budget, None, False, msg, m.state, held=True)


@dataclass(frozen=True)
class SLOStatus:
    """The ``SLOMet`` condition's content: status (``None`` = Unknown), reason constant, message."""

    met: bool | None
    reason: str
    message: str
    ttft: float | None = None
    itl: float | None = None


def slo_status(slo: SLOPolicy, signals: Signals, prefill: float | None) -> SLOStatus:
    """Measured percentiles against the targets.

    Returns:
        ``met`` True (:data:`TARGET_MET`) when every configured target holds; False with
        :data:`PREFILL_ABOVE_TARGET` (the TTFT target is below the prefill percentile alone),
        :data:`TIME_TO_FIRST_TOKEN_ABOVE_TARGET` or :data:`INTER_TOKEN_LATENCY_ABOVE_TARGET`;
        ``None`` with :data:`NO_RECENT_REQUESTS` when nothing was measured in the window.
    """
    p = f"p{slo.percentile:g}"
    ttft, itl = signals.value("ttft"), signals.value("itl")
    parts, reason, met = [], R.TARGET_MET, True
    measured = False
    if slo.ttft_seconds is not None and ttft is not None:
        measured = True
        parts.append(f"{p} time to first token {_num(ttft)}s (target {_num(slo.ttft_seconds)}s)")
        if ttft > slo.ttft_seconds:
            met = False
            reason = (R.PREFILL_ABOVE_TARGET if prefill is not None and prefill >= slo.ttft_seconds
                      else R.TIME_TO_FIRST_TOKEN_ABOVE_TARGET)
            if reason == R.PREFILL_ABOVE_TARGET:
                parts.append(f"the {p} prefill alone takes {_num(prefill)}s: more replicas cannot meet the target")
    if slo.itl_seconds is not None and itl is not None:
        measured = True
        parts.append(f"{p} inter-token latency {_num(itl)}s (target {_num(slo.itl_seconds)}s)")
        if itl > slo.itl_seconds and met:
            met, reason = False, R.INTER_TOKEN_LATENCY_ABOVE_TARGET
    if not measured:
        return SLOStatus(None, R.NO_RECENT_REQUESTS,
                         f"no request measured in the last {slo.window_seconds:g}s", ttft, itl)
    return SLOStatus(met, reason, "; ".join(parts), ttft, itl)
