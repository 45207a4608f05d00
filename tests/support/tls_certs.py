"""Certificates for TLS tests, made with openssl: a CA, a server certificate for 127.0.0.1 and a
client certificate, both signed by the CA, and a second CA that signed neither.

Importable from any test directory (pyproject's pytest ``pythonpath`` puts tests/support on sys.path).
Keys are unencrypted PKCS#8 PEM (what both Python's ssl module and Netty's SslContextBuilder read).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_ca_key: Path


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True, timeout=60)


def sign(directory: Path, name: str, subject: str, ext: str, ca: str) -> tuple[Path, Path]:
    """A new key and certificate ``name.pem`` / ``name.key`` signed by ``ca.pem`` / ``ca.key``."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-subj", subject,
             "-out", f"{name}.csr", cwd=directory)
    (directory / f"{name}.ext").write_text(ext)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-sha256", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=directory)
    return directory / f"{name}.pem", directory / f"{name}.key"


SERVER_EXT = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"


def make_certs(directory: Path) -> Certs:
    """Every file of :class:`Certs` in ``directory``; skips the test when openssl is missing."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH")
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-subj",
                 f"/CN=RocketStore test {ca}", "-days", "2", "-out", f"{ca}.pem", cwd=directory)
    server_cert, server_key = sign(directory, "server", "/CN=127.0.0.1", SERVER_EXT, "ca")
    client_cert, client_key = sign(directory, "client", "/CN=rocketstore-test-client",
                                   "extendedKeyUsage=clientAuth\n", "ca")
    return Certs(directory / "ca.pem", server_cert, server_key, client_cert, client_key,
                 directory / "other-ca.pem", directory / "other-ca.key")


def renew_from_other_ca(certs: Certs, scratch: Path, live: Path) -> None:
    """Replace ``live``'s ``tls.crt`` / ``tls.key`` (as a certificate renewal does, each by an atomic
    rename) with a server certificate for 127.0.0.1 that the other CA signed."""
    shutil.copy(certs.other_ca, scratch / "other-ca.pem")
    shutil.copy(certs.other_ca_key, scratch / "other-ca.key")
    new_cert, new_key = sign(scratch, "renewed", "/CN=127.0.0.1", SERVER_EXT, "other-ca")
    shutil.copy(new_key, live / "tls.key.new")
    shutil.copy(new_cert, live / "tls.crt.new")
    (live / "tls.key.new").replace(live / "tls.key")
    (live / "tls.crt.new").replace(live / "tls.crt")


def enforcing_tls_conf(certs: Certs) -> str:
    """broker.conf lines for a port that speaks TLS only, with the test server certificate (and no
    tls.properties file to pick up from the working directory)."""
    return (f"tls.server.mode=enforcing\ntls.server.certPath={certs.server_cert}\n"
            f"tls.server.keyPath={certs.server_key}\ntls.config.file=/nonexistent/tls.properties\n")


def tls_jvm(trust: Path, cert: Path | None = None, key: Path | None = None) -> list[str]:
    """RocketMQ's client TLS switch, verifying the server against ``trust``."""
    args = ["-Dtls.enable=true", "-Dtls.test.mode.enable=false", "-Dtls.client.authServer=true",
            f"-Dtls.client.trustCertPath={trust}", "-Dtls.config.file=/nonexistent/tls.properties"]
    if cert is not None and key is not None:
        args += [f"-Dtls.client.certPath={cert}", f"-Dtls.client.keyPath={key}"]
    return args
