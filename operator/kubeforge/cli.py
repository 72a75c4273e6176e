"""The ``kubeforge`` command: run the operator, drive the local GPU cluster, run the demo."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kubeforge.sim.tools import REPO_ROOT

if TYPE_CHECKING:
    import asyncio


@click.group()
def main() -> None:
    """kubeforge: gang-placed, topology-aware GPU training jobs and queue-autoscaled inference."""


def _service_ref(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, str] | None:
    """``NAMESPACE/NAME`` of a Service, as (namespace, name)."""
    import re

    if value is None:
        return None
    ns, sep, name = value.partition("/")
    label = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
    if not sep or not re.match(label, ns) or not re.match(label, name):
        raise click.BadParameter(f"must be NAMESPACE/NAME (DNS labels), got {value!r}")
    return ns, name


@main.command()
@click.option("--namespace", "-n", "namespaces", multiple=True,
              help="Watch only these namespaces (repeatable). Default: the whole cluster.")
@click.option("--health-address", default="0.0.0.0:8081", show_default=True,
              help="host:port of the liveness endpoint (GET /healthz).")
@click.option("--metrics-port", default=8080, show_default=True, type=int,
              help="Port of the Prometheus /metrics endpoint (0 disables it).")
@click.option("--metrics-address", default="0.0.0.0", show_default=True, help="Address the /metrics endpoint binds.")
@click.option("--leader-election/--no-leader-election", default=False, show_default=True,
              help="Take part in leader election on a Lease; only the leader acts (run several replicas).")
@click.option("--lease-namespace", envvar="POD_NAMESPACE", default="default", show_default=True,
              help="Namespace of the leader Lease (default: $POD_NAMESPACE).")
@click.option("--lease-name", default="kubeforge-operator", show_default=True, help="Name of the leader Lease.")
@click.option("--prometheus-url-allow", "prometheus_allow", multiple=True,
              help="A URL prefix an InferenceService's prometheusURL may start with (repeatable); a "
                   "prefix ending in ':' allows any port of that host. Default (none given): only "
                   "in-cluster Service URLs (http://NAME.NAMESPACE.svc:PORT). The API server is never "
                   "queried.")
@click.option("--activator-service", default=None, metavar="NAMESPACE/NAME", callback=_service_ref,
              help="The activator's Service (the chart's <release>-activator). InferenceServices with no "
                   "ready replica get its ready addresses in their EndpointSlice, so requests are held, "
                   "not refused. Default: none (requests at zero replicas are refused).")
@click.option("--status-address", default="0.0.0.0:8443", show_default=True,
              help="host:port of the workers' HTTPS status endpoint (progress and checkpoint reports, "
                   "docs/workload-reporting.md); empty: not served.")
@click.option("--status-url", default="", metavar="URL",
              help="The endpoint's base URL as worker pods reach it, e.g. https://kubeforge-status.kubeforge.svc:8443 "
                   "(the chart's Service); its host is in the serving certificate. Empty: workers get no "
                   "reporting environment.")
@click.option("--status-tls-secret", default=None, metavar="NAMESPACE/NAME", callback=_service_ref,
              help="A Secret for the endpoint's CA and certificate, made by the first replica and shared by all "
                   "(docs/workload-reporting.md). Default: a certificate in memory (one process).")
@click.option("--worker-reporting/--no-worker-reporting", default=True, show_default=True,
              help="Give worker pods the projected token, the CA and KUBEFORGE_STATUS_* / KUBEFLOW_TRAINER_STATUS_*.")
@click.option("--progress-write-seconds", default=30.0, show_default=True, type=click.FloatRange(min=0.0),
              help="The least seconds between two writes of a job's status.progress from its workers' reports.")
@click.option("--progress-writes-per-second", default=5.0, show_default=True, type=click.FloatRange(min=0.0),
              help="The most progress writes a second, all jobs together (each job's interval grows beyond it); 0: no bound.")
@click.option("--engine-control-url", default="", metavar="URL",
              help="Reach every model server's sleep/wake endpoints (warm standby) at URL/engines/NAMESPACE/POD "
                   "instead of the leader pod's IP: the local cluster's model-server simulator. Default: the pods.")
@click.option("--model-cache/--no-model-cache", default=False, show_default=True,
              help="Node cache agents run on the pools' nodes (the chart's cacheAgent.enabled): write ModelCacheNode "
                   "specs, prefer nodes that hold a service's spec.model and mount their copy (docs/serving.md).")
@click.option("--event-loop", type=click.Choice(["auto", "uvloop", "asyncio"]), default="auto", show_default=True,
              envvar="KUBEFORGE_EVENT_LOOP",
              help="The event loop: uvloop (no 256 KiB buffer held per kept TLS connection of the workers' status "
                   "endpoint, e2e/README-reporting-bench.md) or Python's asyncio; auto: uvloop when it is installed.")
@click.option("--verbose", "-v", is_flag=True, help="Debug logging.")
def run(namespaces: tuple[str, ...], health_address: str, metrics_port: int, metrics_address: str,
        leader_election: bool, lease_namespace: str, lease_name: str, prometheus_allow: tuple[str, ...],
        activator_service: tuple[str, str] | None, status_address: str, status_url: str,
        status_tls_secret: tuple[str, str] | None, worker_reporting: bool, progress_write_seconds: float,
        progress_writes_per_second: float, engine_control_url: str, model_cache: bool, event_loop: str,
        verbose: bool) -> None:
    """Run the operator (kopf) against the current KUBECONFIG or the in-cluster config."""
    import asyncio

    _without_sync_client()
    import kopf

    import kubeforge.runtime.operator  # noqa: F401  registers the handlers
    from kubeforge import metrics
    from kubeforge.runtime.state import Options, Runtime

    kopf.configure(verbose=verbose)  # kopf's own log format; our loggers propagate to it
    logging.getLogger("kubeforge").setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("httpx").setLevel(logging.DEBUG if verbose else logging.WARNING)  # one line per Prometheus query otherwise
    logging.getLogger("kubernetes_asyncio").setLevel(logging.DEBUG if verbose else logging.WARNING)
    if metrics_port:
        metrics.serve(metrics_port, metrics_address)
    if activator_service:
        # The InferenceService runtime points services at zero replicas at these addresses once it
        # writes their EndpointSlices (issue 14 item 4); until then the flag is only validated.
        logging.getLogger("kubeforge").info("activator Service: %s/%s", *activator_service)
    rt = Runtime(options=Options(prometheus_allow=tuple(prometheus_allow), leader_election=leader_election,
                                 lease_namespace=lease_namespace, lease_name=lease_name,
                                 activator_service=activator_service, namespaces=tuple(namespaces),
                                 status_address=status_address, status_url=status_url.rstrip("/"),
                                 status_tls_secret=status_tls_secret, worker_reporting=worker_reporting,
                                 progress_write_seconds=progress_write_seconds,
                                 progress_writes_per_second=progress_writes_per_second,
                                 engine_control_url=engine_control_url.rstrip("/"), model_cache=model_cache))
    stop = asyncio.Event()
    with operator_loop(event_loop) as loop:
        logging.getLogger("kubeforge").info("event loop: %s", "asyncio" if loop is None else type(loop).__module__)
        kopf.run(
            loop=loop,
            clusterwide=not namespaces,
            namespaces=list(namespaces),
            standalone=True,  # no kopf peering objects: leader election is ours (--leader-election)
            liveness_endpoint=f"http://{health_address}/healthz",
            memo=kopf.Memo(rt=rt, stop=stop),
            stop_flag=stop,
        )
    if rt.exit_code:
        sys.exit(rt.exit_code)  # a loop stopped the operator on purpose (the TrainingJob watch stalled)
    if stop.is_set() and leader_election:
        sys.exit(3)  # leadership lost: restart as a follower


@contextlib.contextmanager
def operator_loop(choice: str) -> Iterator[asyncio.AbstractEventLoop | None]:
    """The event loop ``kubeforge run`` hands ``kopf.run(loop=...)``, closed on exit.

    kopf uses uvloop by itself only in its own command line (``kopf run``); ``kopf.run()`` takes
    the loop it is given, or else runs ``asyncio.run``. This does what kopf's command line does:
    uvloop's loop in an ``asyncio.Runner`` (which cancels what is left, finishes async generators
    and the default executor, then closes the loop, as ``asyncio.run`` does).

    Args:
        choice: ``"auto"`` (uvloop when it can be imported, else asyncio's), ``"uvloop"`` (an
            error when it cannot be imported) or ``"asyncio"``.

    Yields:
        uvloop's loop (``uvloop.Loop``), or ``None`` for Python's own loop: ``kopf.run`` then
        runs ``asyncio.run`` exactly as it did before uvloop was used.

    Raises:
        click.UsageError: ``choice`` is ``"uvloop"`` and uvloop is not installed, or Python is
            older than 3.11 (no ``asyncio.Runner``).
    """
    import asyncio

    factory = None
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise click.UsageError("--event-loop uvloop: uvloop is not installed") from None
        else:
            factory = uvloop.new_event_loop
    if factory is not None and not hasattr(asyncio, "Runner"):
        if choice == "uvloop":
            raise click.UsageError("--event-loop uvloop needs Python 3.11 or later")
        factory = None
    if factory is None:
        yield None
        return
    with asyncio.Runner(loop_factory=factory) as runner:
        yield runner.get_loop()


def _without_sync_client() -> None:
    """Keep the synchronous Kubernetes client (package ``kubernetes``, installed for the local
    cluster's tools) out of the operator process: kopf imports it at start when it is installed,
    only to offer it as a login method and to recognise its model objects, and the operator
    uses neither (it logs in and talks to the API server through kubernetes_asyncio; kopf then
    logs in through kubernetes_asyncio too). That import is about 7 MiB of the operator's
    resident memory (issue 16's 250 MiB target). Left alone when something in this process
    already imported it."""
    if "kubernetes" not in sys.modules:
        sys.modules["kubernetes"] = None  # type: ignore[assignment]  # import kubernetes -> ImportError


def _addresses(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """``--own-address`` values, each possibly a comma-separated list (``status.podIPs``)."""
    import ipaddress

    out = []
    for v in value:
        for a in v.replace(",", " ").split():
            try:
                out.append(str(ipaddress.ip_address(a)))
            except ValueError:
                raise click.BadParameter(f"{a!r} is not an IP address") from None
    return tuple(out)


@main.command("activator")
@click.option("--address", default="0.0.0.0", show_default=True, help="Address the proxy port binds.")
@click.option("--port", default=8012, show_default=True, type=click.IntRange(1, 65535),
              help="The proxy port: what the operator's 'activator' EndpointSlices point at.")
@click.option("--metrics-address", default="0.0.0.0", show_default=True,
              help="Address of the metrics and health port.")
@click.option("--metrics-port", default=9090, show_default=True, type=click.IntRange(1, 65535),
              help="Port of GET /metrics, /healthz (alive) and /readyz (EndpointSlices listed).")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A kubeconfig file. Default: the in-cluster ServiceAccount, else $KUBECONFIG or ~/.kube/config.")
@click.option("--max-body-bytes", default=16 * 1024 * 1024, show_default=True, type=click.IntRange(1),
              help="Largest request body accepted (413 beyond); held bodies are kept in memory.")
@click.option("--max-requests", default=10_000, show_default=True, type=click.IntRange(1),
              help="Requests held or forwarded at once, all services together (503 with Retry-After beyond).")
@click.option("--forward-timeout", default=300.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds a forwarded request may take, to the last byte of its response (504 beyond).")
@click.option("--connect-timeout", default=5.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds to connect to a backend; a refused or timed-out connection tries another one.")
@click.option("--retry-after", default=10, show_default=True, type=click.IntRange(0, 3600),
              help="Seconds in the Retry-After header of 429 (queue full) and 503 (hold timeout) answers.")
@click.option("--shutdown-grace", default=25.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds to keep serving after SIGTERM while requests are held or in flight.")
@click.option("--own-address", "own_addresses", multiple=True, envvar="POD_IPS", callback=_addresses,
              help="This pod's IP addresses (repeatable or comma-separated; default $POD_IPS): never forwarded to.")
@click.option("--identity", envvar="POD_NAME", default=None,
              help="Value of the X-Kubeforge-Activator marker on forwarded requests (default: $POD_NAME, else the host name).")
@click.option("--backend-override", default=None, metavar="URL",
              help="FOR THE LOCAL SIMULATOR ONLY (kwok pods have fake IPs and there is no kube-proxy): send every "
                   "forward to URL instead of the ready replica's address, keeping the Host header.")
@click.option("--verbose", "-v", is_flag=True, help="Debug logging.")
def activator_cmd(address: str, port: int, metrics_address: str, metrics_port: int, kubeconfig: str | None,
                  max_body_bytes: int, max_requests: int, forward_timeout: float, connect_timeout: float,
                  retry_after: int, shutdown_grace: float, own_addresses: tuple[str, ...], identity: str | None,
                  backend_override: str | None, verbose: bool) -> None:
    """Run the activator: hold requests for InferenceServices at zero ready replicas, forward
    them once a replica is Ready (see docs/install.md, "The activator")."""
    import asyncio
    import socket

    from kubeforge.activator import ActivatorConfig, serve

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kubernetes_asyncio").setLevel(logging.DEBUG if verbose else logging.WARNING)
    if backend_override and not backend_override.startswith(("http://", "https://")):
        raise click.BadParameter("must be an http:// or https:// URL", param_hint="--backend-override")
    config = ActivatorConfig(max_body_bytes=max_body_bytes, max_requests=max_requests, forward_timeout=forward_timeout,
                             connect_timeout=connect_timeout, retry_after=retry_after,
                             backend_override=backend_override, own_addresses=own_addresses,
                             identity=identity or socket.gethostname())
    asyncio.run(serve(config, address=address, port=port, metrics_address=metrics_address, metrics_port=metrics_port,
                      kubeconfig=kubeconfig, shutdown_grace=shutdown_grace))


@main.command("cache-agent")
@click.option("--node", envvar="NODE_NAME", required=True,
              help="The node this agent runs on: its ModelCacheNode's name (default: $NODE_NAME).")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A kubeconfig file. Default: the in-cluster ServiceAccount, else $KUBECONFIG or ~/.kube/config.")
@click.option("--identity", envvar="POD_NAME", default=None, help="What status.agent says (default: $POD_NAME).")
@click.option("--hf-endpoint", envvar="HF_ENDPOINT", default=None, metavar="URL",
              help="The Hugging Face Hub endpoint for hf:// models (default: $HF_ENDPOINT, else the Hub).")
@click.option("--interval", default=10.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between passes over the node's ModelCacheNode spec.")
@click.option("--once", is_flag=True, help="One pass, then exit.")
@click.option("--verbose", "-v", is_flag=True, help="Debug logging.")
def cache_agent_cmd(node: str, kubeconfig: str | None, identity: str | None, hf_endpoint: str | None,
                    interval: float, once: bool, verbose: bool) -> None:
    """Run the node's model cache agent: fetch the models its ModelCacheNode asks for, once per
    node, into the pool's hostPath, and report each copy's state (see docs/serving.md)."""
    from kubeforge.cacheagent import serve as serve_cache_agent

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("kubernetes", "urllib3", "httpx", "huggingface_hub"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose else logging.WARNING)
    serve_cache_agent(node, kubeconfig=kubeconfig, identity=identity or node, hf_endpoint=hf_endpoint,
                      interval=interval, once=once)


@main.group()
def sim() -> None:
    """The local GPU cluster: a real control plane with kwok-simulated GPU nodes."""


DEFAULT_FLEET = REPO_ROOT / "examples" / "fleet-h100.yaml"


@sim.command("up")
@click.option("--fleet", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=DEFAULT_FLEET, show_default=True)
@click.option("--name", default="kubeforge", show_default=True)
def sim_up(fleet: Path, name: str) -> None:
    """Build what is missing, start the cluster, create the fleet's nodes."""
    from kubeforge.sim.cluster import Cluster
    from kubeforge.sim.fleet import load_fleet

    c = Cluster(name)
    c.up(load_fleet(fleet), log=lambda m: click.echo(f"[sim] {m}", err=True))
    click.echo(f"export KUBECONFIG={c.kubeconfig}")
    click.echo(f"export PATH={c.bin_dir}:$PATH")


@sim.command("down")
@click.option("--name", default="kubeforge", show_default=True)
def sim_down(name: str) -> None:
    """Stop the operator started by the demo, the provisioner, and delete the cluster."""
    from kubeforge.demo import stop_operator
    from kubeforge.sim.cluster import Cluster

    c = Cluster(name)
    stop_operator(c)
    c.down(log=lambda m: click.echo(f"[sim] {m}", err=True))


@sim.command("nodes")
@click.option("--fleet", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=DEFAULT_FLEET, show_default=True)
def sim_nodes(fleet: Path) -> None:
    """Print the fleet's Node manifests (YAML), e.g. to apply to a kind cluster running kwok."""
    import yaml

    from kubeforge.sim.fleet import load_fleet, node_manifests

    click.echo(yaml.safe_dump_all(node_manifests(load_fleet(fleet)), sort_keys=False))


@sim.command("status")
@click.option("--name", default="kubeforge", show_default=True)
def sim_status(name: str) -> None:
    """Is the cluster up; its nodes and GPU pools."""
    from kubeforge.accelerators.nvidia import CLIQUE_LABEL
    from kubeforge.sim.cluster import Cluster
    from kubeforge.sim.fleet import CAPACITY_TYPE_LABEL

    c = Cluster(name)
    if not c.running():
        click.echo(f"cluster {name}: not running")
        sys.exit(1)
    click.echo(f"cluster {name}: running (KUBECONFIG={c.kubeconfig})")
    columns = f"{CLIQUE_LABEL},cloud.google.com/gce-topology-block,{CAPACITY_TYPE_LABEL}"
    click.echo(c.kubectl("get", "nodes", "-L", columns).stdout)
    click.echo(c.kubectl("get", "gpupools", check=False).stdout)


@main.command()
@click.option("--name", default="kubeforge", show_default=True)
@click.option("--fleet", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=DEFAULT_FLEET, show_default=True)
@click.option("--timeout", default=120.0, show_default=True,
              help="Seconds to wait for the training pods to run and the 405B groups to be Ready.")
@click.option("--burst-seconds", default=16.0, show_default=True, type=click.FloatRange(2, 120),
              help="Seconds of the replayed request burst (5 trace seconds each).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The PNG to draw (GPUs per NVLink domain; the chat service's replicas and queue). "
                   "Default: OUT/demo.png.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("demo-output"),
              show_default=True, help="Folder for the picture and the samples (timeline.json).")
def demo(name: str, fleet: Path, timeout: float, burst_seconds: float, plot: Path | None, out_dir: Path) -> None:
    """The local GPU cluster demo: training jobs and a 405B service placed by NVLink domain, a chat
    service autoscaled live through a burst of real trace requests, and a picture of it all."""
    from kubeforge.demo import matplotlib_missing, run_demo

    if plot is not None and (missing := matplotlib_missing()):
        raise click.UsageError(f"--plot needs matplotlib: {missing}")
    sys.exit(run_demo(name, fleet, timeout, burst_seconds=burst_seconds, plot=plot, out_dir=out_dir))


@main.command()
@click.option("--out", "outs", multiple=True, default=("crds",), show_default=True,
              help="Directory for the plain CRDs (kubectl apply, GitOps).")
@click.option("--chart-out", "chart_outs", multiple=True, default=("charts/kubeforge/templates/crds",),
              show_default=True, help="Directory for the chart's CRD templates (behind crds.install).")
@click.option("--check", is_flag=True, help="Exit 1 when the files differ from fresh output.")
def crds(outs: tuple[str, ...], chart_outs: tuple[str, ...], check: bool) -> None:
    """Generate the CRDs from the pydantic models: crds/ and the chart's templates."""
    from kubeforge.api import crdgen

    args = [a for o in outs for a in ("--out", o)] + [a for o in chart_outs for a in ("--chart-out", o)]
    sys.exit(crdgen.main(args + (["--check"] if check else [])))


if __name__ == "__main__":
    main()
