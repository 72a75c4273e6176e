"""A loopback serving certificate for the peers' webhooks, made with Debian's openssl.

The sim has no Service routing, so the API server reaches each manager's webhook server at
``https://127.0.0.1:<port>/<path>`` (``clientConfig.url``): the serving certificate must name
IP 127.0.0.1, and the webhook configurations carry the CA that signed it (``caBundle``).
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

from ._build import PeersError

KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
"""Kueue v0.16 reads its metrics certificate from this fixed path whenever its internal
certificate management is off (cmd/kueue/main.go), even with the metrics server disabled."""


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "openssl"], check=False, capture_output=True)
        exe = shutil.which("openssl")
    if exe is None:
        raise PeersError("openssl not found (Debian package openssl): needed for the webhooks' certificate")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise PeersError(f"openssl {' '.join(args[:2])} failed: {proc.stderr.strip()[-500:]}")


def loopback_cert(directory: Path) -> tuple[Path, str]:
    """Make (once) a CA and a serving certificate for 127.0.0.1 / localhost under ``directory``.

    Args:
        directory: where ``ca.crt``, ``tls.crt`` and ``tls.key`` go (controller-runtime's
            webhook server reads ``tls.crt`` / ``tls.key`` from its ``certDir``).

    Returns:
        ``(directory, ca_bundle)``: the certificate directory and the CA certificate as the
        base64 text a webhook configuration's ``caBundle`` takes.

    Raises:
        PeersError: openssl is missing or failed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    if not all((directory / f).exists() for f in ("ca.crt", "tls.crt", "tls.key")):
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
                 "-subj", "/CN=kubeforge-peers-ca", cwd=directory)
        _openssl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=127.0.0.1", cwd=directory)
        (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                           "extendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n")
        _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", "tls.crt", "-days", "3650", "-extfile", "san.ext", cwd=directory)
    return directory, base64.b64encode((directory / "ca.crt").read_bytes()).decode()


def kueue_metrics_cert(source: Path) -> None:
    """Put a certificate where Kueue reads its metrics certificate (see
    :data:`KUEUE_METRICS_CERTS`), unless one is there already. Its metrics server stays off."""
    if (KUEUE_METRICS_CERTS / "tls.crt").exists() and (KUEUE_METRICS_CERTS / "tls.key").exists():
        return
    try:
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        for f in ("tls.crt", "tls.key"):
            shutil.copyfile(source / f, KUEUE_METRICS_CERTS / f)
    except OSError as e:
        raise PeersError(f"Kueue needs a certificate at {KUEUE_METRICS_CERTS} (its fixed metrics path): {e}") from e
