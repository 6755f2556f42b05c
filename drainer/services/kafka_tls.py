"""Credentials of the local broker's secured listeners: a CA, server and client certificates
(made with `openssl`), and a SCRAM-SHA-512 user with a generated password.

Made once under `home/kafka/tls/` and kept, so drains configured against the local broker (and
the tests of secured clusters) keep working across restarts. Development material only: the
CA key sits next to the certificates.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from drainer.errors import ServiceError
from drainer.spark.tools import require

SCRAM_USER = "drainer"
SCRAM_MECHANISM = "SCRAM-SHA-512"
DAYS = "3650"


@dataclass(frozen=True)
class LocalCredentials:
    """What a client needs for the local broker's SASL_PLAINTEXT and SSL listeners."""

    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    @property
    def server_keystore(self) -> Path:
        """The broker's PEM keystore: its PKCS#8 key followed by its certificate."""
        return self.root / "server-keystore.pem"

    @property
    def client_certificate(self) -> Path:
        return self.root / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.root / "client.key"

    @property
    def password_file(self) -> Path:
        return self.root / "scram.password"

    @property
    def username(self) -> str:
        return SCRAM_USER

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip()

    @property
    def ready(self) -> bool:
        return all(
            p.is_file()
            for p in (
                self.ca,
                self.server_keystore,
                self.client_certificate,
                self.client_key,
                self.password_file,
            )
        )


def ensure_credentials(root: Path, host: str) -> LocalCredentials:
    """Make the CA, the server and client certificates and the SCRAM password, once."""
    creds = LocalCredentials(root)
    if creds.ready:
        return creds
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    openssl = require("openssl")
    ca_key = root / "ca.key"
    _run(
        openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", DAYS,
        "-subj", "/CN=drainer local CA", "-keyout", ca_key, "-out", creds.ca,
    )  # fmt: skip
    server_key, server_cert = root / "server.key", root / "server.pem"
    _signed(openssl, root, "server", server_key, server_cert, ca_key, creds.ca, host)
    _signed(
        openssl, root, "client", creds.client_key, creds.client_certificate, ca_key, creds.ca, None
    )
    creds.server_keystore.write_text(server_key.read_text() + server_cert.read_text())
    creds.password_file.write_text(secrets.token_urlsafe(24) + "\n")
    for path in root.iterdir():
        path.chmod(0o600)
    return creds


def _signed(
    openssl: str,
    root: Path,
    name: str,
    key: Path,
    cert: Path,
    ca_key: Path,
    ca: Path,
    host: str | None,
) -> None:
    """A PKCS#8 key (what Java's PEM stores read) and a certificate signed by the CA."""
    csr, ext = root / f"{name}.csr", root / f"{name}.ext"
    _run(
        openssl, "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=drainer {name}",
        "-keyout", key, "-out", csr,
    )  # fmt: skip
    usage = "serverAuth" if host else "clientAuth"
    lines = [f"extendedKeyUsage={usage}"]
    if host:
        lines.append(f"subjectAltName=IP:{host},DNS:localhost")
    ext.write_text("\n".join(lines) + "\n")
    _run(
        openssl, "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-days", DAYS, "-extfile", ext, "-out", cert,
    )  # fmt: skip
    csr.unlink()
    ext.unlink()


def _run(*cmd: object) -> None:
    done = subprocess.run(
        [str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    if done.returncode != 0:
        raise ServiceError(f"`{' '.join(map(str, cmd[:3]))} …` failed:\n{done.stdout}")


def upsert_scram_user(bootstrap: str, creds: LocalCredentials) -> None:
    """Create (or reset) the SCRAM user through the PLAINTEXT listener; idempotent."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    client = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    upsert = UserScramCredentialUpsertion(
        creds.username,
        ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
        creds.password.encode(),
    )
    for future in client.alter_user_scram_credentials([upsert], request_timeout=15).values():
        try:
            future.result(timeout=20)
        except Exception as err:
            raise ServiceError(f"creating the local SCRAM user failed: {err}") from None
