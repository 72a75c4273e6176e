"""The status endpoint's certificate, made by the operator, and its CA in each namespace.

Why the operator makes it (and not Helm's ``genCA``/``genSignedCert``): a chart that generates
a key renders a new one on every ``helm upgrade`` and every time Argo CD or Flux renders it
(``lookup`` does not run there), so GitOps tools would show a drift forever and rotate the CA
under running pods. Here nothing random is in the manifests:

- ``--status-tls-secret NAMESPACE/NAME`` (the chart passes ``<release>-status-tls``): the first
  replica to start creates the Secret (a self-signed P-256 CA, ten years, and a serving
  certificate it signs, one year, for the URL's host, ``localhost`` and ``127.0.0.1``); the
  others read it (a create that finds it made answers 409, then it is read). A serving
  certificate that no longer covers the hosts, or has less than :data:`RENEW_BEFORE_SECONDS`
  left, is issued again from the same CA at start (the pods' CA does not change).
- Without the flag (a local operator) the certificate lives in memory for the process's life.
- Both certificates carry the key identifiers of RFC 5280 (4.2.1.1, 4.2.1.2): Python 3.13's
  default client context sets ``VERIFY_X509_STRICT``, under which OpenSSL refuses a CA without
  a Subject Key Identifier and a certificate without an Authority Key Identifier ("Missing
  Authority Key Identifier"), so a worker on 3.13 could not report. A CA made before that
  (a Secret written by an earlier kubeforge) is signed again at start with its own key, the
  identifiers added (:func:`strict_ready`, :func:`with_key_ids`): the leaf it issued still
  verifies under the old copy that running pods hold, and the namespaces' ConfigMaps are
  rewritten with the new copy as their jobs are reconciled (``ServingCert.ca_changed``).
- Workers get the CA through a projected ConfigMap, ``kubeforge-status-ca`` in their namespace
  (KEP-2779 does the same), which :func:`ensure_status_ca` writes before a job's pods are made.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
import os
import ssl
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any

from kubeforge.builders.reporting import build_ca_config_map, ca_of
from kubeforge.runtime.client import ApiError

log = logging.getLogger("kubeforge.status")

CA_SECONDS = 10 * 365 * 86400
"""The CA's life: every pod trusts it through its namespace's ConfigMap."""
CERT_SECONDS = 365 * 86400
"""The serving certificate's life."""
RENEW_BEFORE_SECONDS = 90 * 86400
"""A serving certificate with less than this left is issued again at start."""
KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")


@dataclass(frozen=True)
class ServingCert:
    """The endpoint's CA and serving pair, PEM.

    Attributes:
        ca: The CA certificate (what workers trust).
        ca_key: The CA's private key (to issue the serving certificate again).
        cert: The serving certificate.
        key: Its private key.
        ca_changed: Whether this start serves another CA than the namespaces' ConfigMaps may
            hold: a new one (no Secret, or none in it) or the Secret's signed again to add its
            key identifiers (:func:`with_key_ids`; the old copy is refused by a strict client).
            The ConfigMaps are then rewritten as their jobs are reconciled
            (``Runtime.status_ca_refresh``), not only when pods are made. Not compared.
    """

    ca: str
    ca_key: str
    cert: str
    key: str
    ca_changed: bool = field(default=False, compare=False)

    def secret_data(self) -> dict[str, str]:
        """The Secret's ``data`` (base64)."""
        vals = (self.ca, self.ca_key, self.cert, self.key)
        return {k: base64.b64encode(v.encode()).decode() for k, v in zip(KEYS, vals)}


def _pem(obj: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    if hasattr(obj, "public_bytes"):
        return obj.public_bytes(serialization.Encoding.PEM).decode()
    return obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _name(cn: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def new_ca(now: float) -> tuple[str, str]:
    """A self-signed CA (P-256): ``(certificate PEM, key PEM)``."""
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    start = dt.datetime.fromtimestamp(now - 300, tz=dt.timezone.utc)
    return _ca_cert(key, start, start + dt.timedelta(seconds=CA_SECONDS)), _pem(key)


def _ca_cert(key: Any, start: dt.datetime, end: dt.datetime) -> str:
    """The self-signed CA certificate (PEM) of the private ``key`` valid from ``start`` to
    ``end``, with its Subject and Authority Key Identifiers (RFC 5280's method 1: SHA-1 of the
    key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())  # type: ignore[arg-type]
    cert = (x509.CertificateBuilder().subject_name(_name("kubeforge-status-ca")).issuer_name(_name("kubeforge-status-ca"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())  # type: ignore[arg-type]
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
            .sign(key, hashes.SHA256()))  # type: ignore[arg-type]
    return _pem(cert)


def _has(cert: Any, ext: Any) -> bool:
    from cryptography import x509

    try:
        cert.extensions.get_extension_for_class(ext)
    except x509.ExtensionNotFound:
        return False
    return True


def strict_ready(sc: ServingCert) -> bool:
    """Whether a client with ``VERIFY_X509_STRICT`` (Python 3.13's default) accepts the pair's
    key identifiers: the CA has a Subject Key Identifier, the serving certificate an Authority
    Key Identifier. False for an unreadable certificate."""
    from cryptography import x509

    try:
        ca = x509.load_pem_x509_certificate(sc.ca.encode())
        leaf = x509.load_pem_x509_certificate(sc.cert.encode())
    except ValueError:
        return False
    return _has(ca, x509.SubjectKeyIdentifier) and _has(leaf, x509.AuthorityKeyIdentifier)


def with_key_ids(ca_pem: str, ca_key_pem: str) -> str:
    """The CA ``ca_pem`` signed again with its own key, its validity kept, the key identifiers
    added (the same CA when it has them). A certificate it issued verifies under either copy:
    same subject, same key.

    Raises:
        ValueError: a certificate or key that does not load.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ca = x509.load_pem_x509_certificate(ca_pem.encode())
    if _has(ca, x509.SubjectKeyIdentifier):
        return ca_pem
    key = serialization.load_pem_private_key(ca_key_pem.encode(), password=None)
    return _ca_cert(key, ca.not_valid_before_utc, ca.not_valid_after_utc)


def _san(hosts: list[str]) -> Any:
    from cryptography import x509

    names: list[Any] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return x509.SubjectAlternativeName(names)


def issue(ca_pem: str, ca_key_pem: str, hosts: list[str], now: float) -> tuple[str, str]:
    """A serving certificate for ``hosts`` (DNS names or IPs) signed by the CA: ``(cert, key)`` PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca = x509.load_pem_x509_certificate(ca_pem.encode())
    ca_key = serialization.load_pem_private_key(ca_key_pem.encode(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    start = dt.datetime.fromtimestamp(now - 300, tz=dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + dt.timedelta(seconds=CERT_SECONDS))
            .add_extension(_san(hosts), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()), critical=False)  # type: ignore[arg-type]
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    return _pem(cert), _pem(key)


def covers(cert_pem: str, hosts: list[str], now: float) -> bool:
    """Whether the certificate names every host and has :data:`RENEW_BEFORE_SECONDS` left."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    have = {str(n.value) for n in san}
    left = cert.not_valid_after_utc.timestamp() - now
    return all(h in have for h in hosts) and left > RENEW_BEFORE_SECONDS


def make_cert(hosts: list[str], now: float, ca: tuple[str, str] | None = None) -> ServingCert:
    """A serving pair for ``hosts``, from ``ca`` (certificate, key) or a new CA."""
    ca_pem, ca_key = ca or new_ca(now)
    cert, key = issue(ca_pem, ca_key, hosts, now)
    return ServingCert(ca_pem, ca_key, cert, key)


def ssl_context(sc: ServingCert) -> ssl.SSLContext:
    """A server context with the serving pair (TLS 1.2 at least). ``load_cert_chain`` reads
    files only: the pair goes through a private temporary directory, removed at once."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="kubeforge-tls-") as d:
        cert, key = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
        with open(cert, "w") as f:
            f.write(sc.cert + sc.ca)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(sc.key)
        ctx.load_cert_chain(cert, key)
    return ctx


def _from_secret(body: dict[str, Any] | None) -> ServingCert | None:
    data = (body or {}).get("data") or {}
    try:
        vals = [base64.b64decode(data[k]).decode() for k in KEYS]
    except (KeyError, ValueError):
        return None
    return ServingCert(*vals)


async def serving_cert(client: Any, secret: tuple[str, str] | None, hosts: list[str], now: float) -> ServingCert:
    """The serving pair: from the Secret (created or renewed as needed, see the module
    docstring), or made in memory when ``secret`` is None.

    Raises:
        ApiError: the Secret could not be read or written (the operator cannot serve TLS).
    """
    if secret is None:
        return replace(make_cert(hosts, now), ca_changed=True)
    ns, name = secret
    path = f"/api/v1/namespaces/{ns}/secrets/{name}"
    for _ in range(3):
        try:
            body = await client.request("GET", path, read=True, resource="secrets")
        except ApiError as e:
            if e.code != 404:
                raise
            body = None
        have = _from_secret(body)
        if have is not None and covers(have.cert, hosts, now) and strict_ready(have):
            return have
        made = make_cert(hosts, now, (with_key_ids(have.ca, have.ca_key), have.ca_key) if have else None)
        if have is None or made.ca != have.ca:
            made = replace(made, ca_changed=True)
        obj = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": made.secret_data(),
               "metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/managed-by": "kubeforge"}}}
        try:
            if body is None:
                await client.request("POST", f"/api/v1/namespaces/{ns}/secrets", obj, resource="secrets")
                log.info("status endpoint: created the CA and serving certificate in Secret %s/%s", ns, name)
            else:
                obj["metadata"]["resourceVersion"] = body["metadata"]["resourceVersion"]
                await client.request("PUT", path, obj, resource="secrets")
                log.info("status endpoint: issued a new serving certificate in Secret %s/%s (same CA%s)", ns, name,
                         ", signed again with its key identifiers: strict clients such as Python 3.13's refused it"
                         if made.ca_changed else "")
            return made
        except ApiError as e:
            if e.code != 409:  # another replica wrote it first: read theirs
                raise
    raise ApiError(409, "Conflict", f"Secret {ns}/{name} kept changing while the status endpoint started")


async def ensure_status_ca(rt: Any, namespace: str) -> None:
    """Write the namespace's CA ConfigMap (``kubeforge-status-ca``) when it is missing or holds
    another CA; once per namespace and CA per process. A no-op while reporting is off or the
    endpoint has no certificate yet. A refusal is logged, never raised: the volume source is
    optional, so the pods start anyway (and report once the ConfigMap exists)."""
    ca = rt.status_ca
    cfg = rt.reporting()
    if not ca or cfg is None or rt.status_ca_written.get(namespace) == ca:
        return
    name = cfg.ca_config_map
    path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
    want = build_ca_config_map(namespace, ca, name)
    try:
        try:
            have = await rt.client.request("GET", path, read=True, resource="configmaps")
        except ApiError as e:
            if e.code != 404:
                raise
            await rt.client.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", want, resource="configmaps")
        else:
            if ca_of(have) != ca:
                await rt.client.request("PATCH", path, {"data": want["data"]}, resource="configmaps",
                                        content_type="application/merge-patch+json")
        rt.status_ca_written[namespace] = ca
    except ApiError as e:
        if e.code == 409:  # created meanwhile by another pass: next time it is read
            return
        log.warning("status endpoint: cannot write ConfigMap %s/%s: %s", namespace, name, e)
