"""What a phase of the training bench cost: API calls (the API server's counter, attributed by
what each component writes, and the operator's own), the operator's CPU seconds and RSS, the
API server's RSS."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from e2e.bench.lib.cluster import Cluster, component_pid, operator_metrics_port
from e2e.bench.lib.metrics import READ_VERBS, counter_delta, scrape_apiserver, scrape_operator_requests
from e2e.bench.lib.procs import RssSampler, cpu_seconds, rss_mib

__all__ = ["WHO_NOTE", "Cost", "measure_cost", "print_cost", "who_writes"]


def who_writes(verb: str, group: str, resource: str, sub: str, pods_by: str) -> str:
    """Who, in this bench, makes a write of (verb, group, resource, subresource).

    ``pods_by`` is the creator of the phase's pods: ``operator`` or ``bench``. The API server's
    counter has no client label; the attribution below is by what each component writes here.
    """
    if resource == "trainingjobs" and verb == "POST":
        return "bench"
    if resource in ("namespaces",):
        return "bench"
    if resource == "pods" and sub == "binding":
        return "kube-scheduler"
    if resource == "pods" and sub == "status":
        return "kwok"
    if resource == "nodes":
        return "kwok"
    if resource == "leases":
        return "kwok"
    if resource == "events" and group == "events.k8s.io":
        return "kube-scheduler"
    if resource == "events":
        return "events"
    if resource == "persistentvolumes":
        return "provisioner"
    if resource == "persistentvolumeclaims" and (sub or verb in ("PUT",)):
        return "controller-manager"
    if resource in ("endpoints", "endpointslices", "serviceaccounts", "configmaps", "secrets",
                    "replicasets", "deployments", "controllerrevisions"):
        return "controller-manager"
    if resource == "pods":
        return pods_by
    if resource in ("trainingjobs", "gpupools", "inferenceservices", "services", "persistentvolumeclaims"):
        return "operator"
    return "other"


WHO_NOTE = {
    "operator": "the operator (pods, trainingjobs/status, gpupools/status, services, persistentvolumeclaims)",
    "events": "core/v1 events: the operator's, and other components' (the baseline, without operator, shows their share)",
    "bench": "the bench itself (trainingjobs POST; plain pods in the baseline)",
    "kwok": "kwok: pods/status (also kube-scheduler's PodScheduled=False), node heartbeats, node leases",
    "kube-scheduler": "kube-scheduler: pods/binding, events.k8s.io events",
    "provisioner": "the sim PV provisioner and PV controller: persistentvolumes",
    "controller-manager": "kube-controller-manager: PVC binding, endpoints, endpointslices",
    "other": "not attributed",
}


@dataclass
class Cost:
    """What a phase cost: API calls (server and operator counters), operator CPU and RSS."""

    api: dict | None = None  # apiserver_request_total delta
    op_api: dict | None = None  # kubeforge_api_requests_total delta
    op_api_why: str = ""
    cpu_s: float = float("nan")
    rss_peak: float = float("nan")
    rss_end: float = float("nan")
    rss_hwm: float = float("nan")
    rss_start: float = float("nan")
    api_rss_peak: float = float("nan")


def measure_cost(c: Cluster, pid: int | None) -> Callable[[], Cost]:
    """Start measuring a phase's cost now; returns ``finish()`` that stops and returns the Cost.

    Scrapes both API counters, reads the operator's CPU time and starts RSS samplers for the
    operator (``pid``, may be None) and the API server.
    """
    cost = Cost()
    port = operator_metrics_port(c) if pid else None
    api0 = scrape_apiserver(c)
    op0, _ = scrape_operator_requests(port)
    cpu0 = cpu_seconds(pid)
    cost.rss_start = rss_mib(pid)
    op_rss = RssSampler(pid).start() if pid else None
    api_rss = RssSampler(component_pid(c, "kube-apiserver"), 1.0).start()

    def finish() -> Cost:
        cost.cpu_s = cpu_seconds(pid) - cpu0
        if op_rss:
            op_rss.stop()
            cost.rss_peak, cost.rss_end, cost.rss_hwm = op_rss.peak, op_rss.last, rss_mib(pid, "VmHWM")
        api_rss.stop()
        cost.api_rss_peak = api_rss.peak
        cost.api = counter_delta(api0, scrape_apiserver(c))
        op1, cost.op_api_why = scrape_operator_requests(port)
        cost.op_api = counter_delta(op0 or {}, op1) if op1 is not None else None
        return cost

    return finish


def print_cost(name: str, cost: Cost, s: dict, pods_by: str, per_admitted: bool = False) -> None:
    """API calls per placed gang (API server and operator counters), operator CPU and RSS.

    With ``per_admitted`` (``--admission-only``) the figures are per admitted gang instead, since
    the phase ended before the admitted gangs were placed.
    """
    gangs = s["adm_n"] if per_admitted else s["placed"]
    kind = "admitted" if per_admitted else "placed"
    n_per = (s["adm_pods"] if per_admitted else s["placed_pods"]) / gangs if gangs else float("nan")
    per = (lambda v: f"{v / gangs:8.2f}") if gangs else (lambda v: f"{'-':>8}")
    print(f"\n  {name}: API calls during the phase ({gangs} {kind} gangs, N = {n_per:.2f} pods per {kind} gang)"
          + ("; --admission-only: the phase ended at admission, so writes for these gangs' pods were still in "
             "flight and per-gang figures undercount" if per_admitted else ""))
    if cost.api is None:
        print("    apiserver_request_total: not available (kubectl get --raw /metrics failed)")
    else:
        rows: dict[tuple, dict[str, float]] = {}
        reads: dict[str, float] = {}
        for (verb, group, res, sub, code), v in cost.api.items():
            if verb in READ_VERBS:
                reads[verb] = reads.get(verb, 0) + v
                continue
            who = who_writes(verb, group, res, sub, pods_by)
            key = (who, verb, (f"{group}/" if group and res == "events" else "") + res + (f"/{sub}" if sub else ""))
            rows.setdefault(key, {})[code] = rows.get(key, {}).get(code, 0) + v
        order = ["operator", "events", "bench", "kube-scheduler", "kwok", "controller-manager", "provisioner", "other"]
        print("    from the API server's apiserver_request_total (writes; no client label, attributed by what each "
              "component writes)")
        print(f"    {'who':<20} {'verb':<7} {'resource':<34} {'count':>7} {'per gang':>8}  codes")
        totals: dict[str, float] = {}
        for key in sorted(rows, key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[2], k[1])):
            who, verb, res = key
            n = sum(rows[key].values())
            totals[who] = totals.get(who, 0) + n
            codes = " ".join(f"{c}:{int(v)}" for c, v in sorted(rows[key].items()))
            print(f"    {who:<20} {verb:<7} {res:<34} {int(n):>7} {per(n)}  {codes}")
        op = totals.get(pods_by if pods_by == "operator" else "bench", 0)
        if pods_by == "operator":
            ev = totals.get("events", 0)
            print(f"    => operator writes per {kind} gang: {per(op).strip()} (excl. core/v1 events), "
                  f"{per(op + ev).strip()} incl. them; N per gang {n_per:.2f}, so N + 2 = {n_per + 2:.2f}")
        else:
            print(f"    => pods created by the bench per {kind} gang: {per(op).strip()} (no operator: the floor for "
                  f"any controller that creates N pods is N = {n_per:.2f})")
        excluded = [w for w in order[2:] if totals.get(w) and not (w == "bench" and pods_by == "bench")]
        for w in excluded:
            print(f"    excluded: {WHO_NOTE[w]}: {int(totals[w])} writes")
        print("    reads by every client (the API server cannot tell them apart): "
              + ", ".join(f"{v} {int(n)}" for v, n in sorted(reads.items())))
    if pods_by == "operator":
        if cost.op_api is None:
            print(f"    kubeforge_api_requests_total: not available ({cost.op_api_why}); skipped")
        else:
            print("    from the operator's own kubeforge_api_requests_total{verb,resource,code}:")
            agg: dict[tuple, dict[str, float]] = {}
            for (verb, res, code), v in cost.op_api.items():
                agg.setdefault((verb, res), {})[code] = agg.get((verb, res), {}).get(code, 0) + v
            w_total = r_total = 0.0
            for (verb, res) in sorted(agg, key=lambda k: (k[0].upper() in READ_VERBS, k[1], k[0])):
                n = sum(agg[(verb, res)].values())
                if verb.upper() in READ_VERBS:
                    r_total += n
                else:
                    w_total += n
                codes = " ".join(f"{c}:{int(v)}" for c, v in sorted(agg[(verb, res)].items()))
                print(f"    {'operator':<20} {verb:<7} {res:<34} {int(n):>7} {per(n)}  {codes}")
            print(f"    => operator writes per {kind} gang {per(w_total).strip()}, reads {per(r_total).strip()} "
                  f"(N + 2 = {n_per + 2:.2f})")
        cpj = cost.cpu_s / gangs if gangs else float("nan")
        cpa = cost.cpu_s / s["adm_n"] if s["adm_n"] else float("nan")
        print(f"    operator CPU during the phase {cost.cpu_s:.1f}s = {1000 * cpj:.0f} ms per placed job "
              f"({1000 * cpa:.0f} ms per admitted job); "
              f"operator RSS {cost.rss_start:.0f} MiB at the start, peak {cost.rss_peak:.0f} MiB (sampled every 0.5 s), "
              f"{cost.rss_end:.0f} MiB at the end (VmHWM {cost.rss_hwm:.0f} MiB); kube-apiserver RSS peak "
              f"{cost.api_rss_peak:.0f} MiB")
    else:
        print(f"    kube-apiserver RSS peak {cost.api_rss_peak:.0f} MiB")
