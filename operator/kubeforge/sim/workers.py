"""Real training processes for the simulated pods: a worker pod the operator built, run as a local
process with exactly that pod's environment, mapped to this machine the way a kubelet would.

kwok pods run nothing. To run a real PyTorch job under kubeforge's contract (the test of issue 27,
``tests/test_torch_system.py``), each pod of the gang becomes one local process:

- its main container's ``env`` is taken from the pod object the operator created (built by
  :func:`kubeforge.builders.training.build_worker_pod`), never retyped;
- each volume mount becomes a local directory and every variable whose value lies under the
  mount path is rewritten to it (what a kubelet's bind mount does): the checkpoint volume is
  one directory shared by the gang (a ReadWriteMany claim); the status volume holds a real
  projected token, made for that pod with the TokenRequest API (audience
  :data:`kubeforge.api.STATUS_TOKEN_AUDIENCE`, bound to the pod object), and the CA from the
  namespace's ``kubeforge-status-ca`` ConfigMap;
- a worker's DNS name (``<job>-worker-<r>.kubeforge-workers.<ns>.svc``, where cluster DNS would
  be needed) becomes ``127.0.0.1``; nothing else is changed (no /etc/hosts edit);
- ``TERMINATION_MESSAGE_PATH`` points at a file per pod (the kubelet's
  ``terminationMessagePath``).

PyTorch is Debian's (``python3-torch`` 1.13, CPU, gloo, for ``/usr/bin/python3``), installed by
:func:`ensure_torch` (``make system-deps``). Its ``torchrun`` crashes at start under Python 3.11
(``to_map``: ``'NoneType' object has no attribute 'get'``): ``Std.from_str("0")`` iterates the
``IntFlag`` and, from Python 3.11 on, iteration skips the zero member, so the default
``--redirects 0 --tee 0`` become None. :data:`TORCHRUN_FLAGS` sets them to 1 (stdout to a file
and teed to the console), which parses; torchrun then reads every other flag from the pod's
``PET_*`` variables, as it does in a cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kubeforge.api import STATUS_TOKEN_AUDIENCE
from kubeforge.builders.reporting import CA_FILE, STATUS_VOLUME, TOKEN_FILE
from kubeforge.objects import WORKERS_SERVICE, main_container

DEBIAN_PYTHON = "/usr/bin/python3"
"""The interpreter Debian's ``python3-torch`` is installed for."""
TORCH_PACKAGE = "python3-torch"
TORCHRUN_FLAGS = {"PET_REDIRECTS": "1", "PET_TEE": "1"}
"""torchrun flags (as its ``PET_*`` variables) that dodge Debian's torch 1.13 crash under
Python 3.11 (see the module docstring)."""


class TorchError(RuntimeError):
    """Debian's PyTorch could not be found or installed; the message says why."""


def has_torch(python: str = DEBIAN_PYTHON) -> bool:
    """Whether ``python`` imports torch (with torch.distributed)."""
    if not os.path.exists(python):
        return False
    proc = subprocess.run([python, "-c", "import torch.distributed"], capture_output=True, timeout=120, check=False)
    return proc.returncode == 0


def ensure_torch(log: Callable[[str], None] = print) -> str:
    """Return Debian's python3 with torch, installing ``python3-torch`` first when missing
    (``apt-get``, root only; about 180 packages, 1.5 GB, once).

    Raises:
        TorchError: not there and not installable.
    """
    if has_torch():
        return DEBIAN_PYTHON
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise TorchError(f"{DEBIAN_PYTHON} has no torch: install Debian's package (apt-get install {TORCH_PACKAGE})")
    log(f"installing Debian's {TORCH_PACKAGE} package (apt-get install {TORCH_PACKAGE})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", TORCH_PACKAGE]):
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, check=False,
                              timeout=1800)
        if proc.returncode != 0:
            raise TorchError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
    if not has_torch():
        raise TorchError(f"apt-get install {TORCH_PACKAGE} succeeded but {DEBIAN_PYTHON} cannot import torch")
    return DEBIAN_PYTHON


def container_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The main container's literal ``env`` (``valueFrom`` entries are left out)."""
    containers = pod["spec"]["containers"]
    name = main_container([c.get("name") for c in containers])
    main = next(c for c in containers if c.get("name") == name)
    return {e["name"]: str(e["value"]) for e in main.get("env") or [] if "value" in e}


def container_mounts(pod: Mapping[str, Any]) -> dict[str, str]:
    """The main container's volume mounts: volume name -> mount path."""
    containers = pod["spec"]["containers"]
    name = main_container([c.get("name") for c in containers])
    main = next(c for c in containers if c.get("name") == name)
    return {m["name"]: m["mountPath"] for m in main.get("volumeMounts") or []}


def map_env(env: Mapping[str, str], mounts: Mapping[str, Path | str], namespace: str) -> dict[str, str]:
    """``env`` as seen on this machine: values under a mount path moved to its local directory
    (``mounts``: mount path -> local directory), workers' DNS names to ``127.0.0.1``."""
    dns = f".{WORKERS_SERVICE}.{namespace}.svc"
    out = {}
    for k, v in env.items():
        if v.endswith(dns) or v.endswith(dns + ".cluster.local"):
            v = "127.0.0.1"
        for path, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            if v == path or v.startswith(path.rstrip("/") + "/"):
                v = str(local) + v[len(path.rstrip("/")):]
                break
        out[k] = v
    return out


@dataclass
class LocalWorker:
    """One pod of the gang as a local process.

    Attributes:
        pod: The pod's name.
        env: Its mapped environment (plus :data:`TORCHRUN_FLAGS` and what the caller adds).
        root: Its private directory (status volume, termination message, output).
        proc: The process once started.
    """

    pod: str
    env: dict[str, str]
    root: Path
    proc: subprocess.Popen | None = None

    @property
    def output(self) -> Path:
        """Its stdout and stderr."""
        return self.root / "output.log"

    @property
    def termination_message(self) -> Path:
        """The file its ``TERMINATION_MESSAGE_PATH`` points at."""
        return self.root / "termination-log"

    def start(self, argv: Sequence[str]) -> subprocess.Popen:
        """Start ``argv`` with :attr:`env` in a new session (a signal reaches only its leader,
        as the kubelet signals a container's PID 1)."""
        out = open(self.output, "ab")
        try:
            self.proc = subprocess.Popen(list(argv), env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            out.close()
        return self.proc


def local_worker(pod: Mapping[str, Any], root: Path, token: str, ca_pem: str, shared: Mapping[str, Path],
                 extra_env: Mapping[str, str] | None = None) -> LocalWorker:
    """A :class:`LocalWorker` for ``pod`` (an object the API server holds).

    Args:
        pod: The pod.
        root: A directory for this pod (created).
        token: Its projected token (:func:`pod_token`).
        ca_pem: The endpoint's CA (the namespace's ``kubeforge-status-ca``).
        shared: Local directories of the other volumes by volume name (e.g. the checkpoint
            volume, one for the whole gang).
        extra_env: Added last (``PATH``, ``PYTHONPATH``...).
    """
    root.mkdir(parents=True, exist_ok=True)
    status_dir = root / "status"
    status_dir.mkdir(exist_ok=True)
    (status_dir / TOKEN_FILE).write_text(token)
    (status_dir / CA_FILE).write_text(ca_pem)
    mounts = container_mounts(pod)
    local = {path: (status_dir if vol == STATUS_VOLUME else shared[vol]) for vol, path in mounts.items()
             if vol == STATUS_VOLUME or vol in shared}
    env = map_env(container_env(pod), local, pod["metadata"]["namespace"])
    w = LocalWorker(pod["metadata"]["name"], env, root)
    env.update({"TERMINATION_MESSAGE_PATH": str(w.termination_message), **TORCHRUN_FLAGS, **(extra_env or {})})
    return w


def pod_token(kubectl: Callable[..., Any], pod: Mapping[str, Any], seconds: int = 3600) -> str:
    """A ServiceAccount token for ``pod`` as its projected volume would hold it: the TokenRequest
    API, audience :data:`~kubeforge.api.STATUS_TOKEN_AUDIENCE`, bound to the pod object (name and
    uid), for its ServiceAccount."""
    md, spec = pod["metadata"], pod["spec"]
    out = kubectl("create", "token", spec.get("serviceAccountName") or "default", "-n", md["namespace"],
                  "--audience", STATUS_TOKEN_AUDIENCE, "--bound-object-kind", "Pod",
                  "--bound-object-name", md["name"], "--bound-object-uid", md["uid"], "--duration", f"{seconds}s")
    return out.stdout.strip()


def termination_checkpoint(worker: LocalWorker) -> dict[str, Any] | None:
    """The JSON line the worker left in its termination message, or None."""
    try:
        return json.loads(worker.termination_message.read_text().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None
