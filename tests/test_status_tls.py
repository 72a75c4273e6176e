"""The status endpoint's certificates under a strict verifier (Python 3.13's default client
context sets ``VERIFY_X509_STRICT``), and the upgrade of a CA made before they had key
identifiers. Real TLS handshakes over loopback sockets."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubeforge.runtime.status_tls import KEYS, ServingCert, _pem as pem, make_cert, serving_cert, ssl_context, strict_ready, with_key_ids
from test_status_server import FakeClient

HOSTS = ["127.0.0.1", "localhost"]


def handshake(sc: ServingCert, ca_pem: str, tmp: Path, strict: bool) -> str | None:
    """One TLS handshake of a client trusting ``ca_pem`` with the server of ``sc``: None when it
    completes, else the client's error."""
    ca_file = tmp / f"ca-{time.monotonic_ns()}.crt"
    ca_file.write_text(ca_pem)
    client = ssl.create_default_context(cafile=str(ca_file))
    if strict:
        client.verify_flags |= ssl.VERIFY_X509_STRICT
    else:  # Python 3.11's default (3.13's sets the flag)
        client.verify_flags &= ~ssl.VERIFY_X509_STRICT
    server = ssl_context(sc)
    with socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)

        def serve() -> None:
            conn, _ = ls.accept()
            try:
                with server.wrap_socket(conn, server_side=True) as s:
                    s.recv(1)
            except (ssl.SSLError, OSError):
                pass

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            with socket.create_connection(ls.getsockname()) as raw, \
                    client.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.send(b"x")
            return None
        except ssl.SSLError as e:
            return str(e)
        finally:
            t.join(5)


def old_pair(now: float) -> ServingCert:
    """A pair as kubeforge made it before the key identifiers (no SKI on the CA, no AKI on the leaf)."""
    name = lambda cn: x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])  # noqa: E731
    start = dt.datetime.fromtimestamp(now - 300, tz=dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("kubeforge-status-ca")).issuer_name(name("kubeforge-status-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(start + dt.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder().subject_name(name(HOSTS[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + dt.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOSTS[0])),
                                                        x509.DNSName(HOSTS[1])]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    return ServingCert(pem(ca), pem(ca_key), pem(leaf), pem(key))


def test_a_strict_client_accepts_the_certificate(tmp_path):
    sc = make_cert(HOSTS, time.time())
    assert strict_ready(sc)
    assert handshake(sc, sc.ca, tmp_path, strict=True) is None
    assert handshake(sc, sc.ca, tmp_path, strict=False) is None


def test_the_pair_made_before_key_identifiers_fails_a_strict_client(tmp_path):
    """What a worker on Python 3.13 met: the old pair is refused under VERIFY_X509_STRICT."""
    sc = old_pair(time.time())
    assert not strict_ready(sc)
    assert "Authority Key Identifier" in (handshake(sc, sc.ca, tmp_path, strict=True) or "")
    assert handshake(sc, sc.ca, tmp_path, strict=False) is None


def test_an_old_secret_gets_the_same_ca_key_with_identifiers_and_a_new_leaf(tmp_path):
    now = time.time()
    old = old_pair(now)
    c = FakeClient()
    path = "/api/v1/namespaces/kf/secrets/status-tls"
    c.secrets[path] = {"metadata": {"name": "status-tls", "namespace": "kf", "resourceVersion": "1"},
                       "data": old.secret_data()}
    new = asyncio.run(serving_cert(c, ("kf", "status-tls"), HOSTS, now))
    assert strict_ready(new) and new.ca_key == old.ca_key and new.ca != old.ca and new.ca_changed
    old_ca, new_ca = (x509.load_pem_x509_certificate(p.encode()) for p in (old.ca, new.ca))
    assert new_ca.subject == old_ca.subject and new_ca.public_key() == old_ca.public_key()
    assert (new_ca.not_valid_before_utc, new_ca.not_valid_after_utc) == (old_ca.not_valid_before_utc,
                                                                         old_ca.not_valid_after_utc)
    stored = {k: base64.b64decode(v).decode() for k, v in c.secrets[path]["data"].items()}
    assert stored == dict(zip(KEYS, (new.ca, new.ca_key, new.cert, new.key)))
    # a strict client with the new CA, and a running pod that still holds the old copy
    assert handshake(new, new.ca, tmp_path, strict=True) is None
    assert handshake(new, old.ca, tmp_path, strict=False) is None
    # read again: nothing more to change
    again = asyncio.run(serving_cert(c, ("kf", "status-tls"), HOSTS, now))
    assert again == new and not again.ca_changed


def test_with_key_ids_keeps_a_ca_that_has_them():
    sc = make_cert(HOSTS, time.time())
    assert with_key_ids(sc.ca, sc.ca_key) == sc.ca
    with pytest.raises(ValueError):
        with_key_ids("not a certificate", sc.ca_key)


def test_a_resigned_ca_reaches_the_namespaces_of_running_jobs():
    """After the CA is signed again at start, a running job's reconcile (no pod to make) writes
    its namespace's CA ConfigMap once; without the re-sign it writes nothing there."""
    from fakekube import small_cluster
    from kubeforge.runtime.admission import admission_round
    from kubeforge.runtime.client import ApiError
    from kubeforge.runtime.training import reconcile_job
    from records import NS, job_body

    async def go() -> list[tuple[str, str]]:
        kube = await small_cluster(1)
        rt = kube.rt
        await kube.client_create("TrainingJob", job_body("a", gpus=8))
        await admission_round(rt, kube.now)
        await reconcile_job(rt, (NS, "a"))  # placed, its pod made (no CA yet: no ConfigMap)
        assert kube.items("Pod")
        calls: list[tuple[str, str]] = []
        maps: dict[str, dict] = {}
        plain = rt.client.request

        async def request(method, path, body=None, **kw):
            if "/configmaps" not in path:
                return await plain(method, path, body, **kw)
            calls.append((method, path))
            if method == "GET":
                if path not in maps:
                    raise ApiError(404, "NotFound", "no")
                return maps[path]
            maps[f"{path}/{body['metadata']['name']}" if method == "POST" else path] = body
            return None

        rt.client.request = request
        rt.options.worker_reporting, rt.options.status_url = True, "https://kubeforge-status.kf.svc:8443"
        rt.options.status_address = "0.0.0.0:8443"
        rt.status_ca = make_cert(HOSTS, time.time()).ca
        await reconcile_job(rt, (NS, "a"))
        assert calls == []  # an unchanged CA: running pods keep theirs, nothing is written
        rt.status_ca_refresh = True
        await reconcile_job(rt, (NS, "a"))
        await reconcile_job(rt, (NS, "a"))  # once per namespace and CA
        return calls

    calls = asyncio.run(go())
    assert [m for m, _ in calls] == ["GET", "POST"] and all(f"/namespaces/{NS}/" in p for _, p in calls)
