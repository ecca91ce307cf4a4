"""The embedded coordinator's serving certificate, issued and renewed by the operator from a
CA it is given (the chart's coordinator.tls.generate: the CA's ca.crt and ca.key in a
Secret mounted into the operator pod; docs/server.md, "TLS").

The serving certificate is short-lived (`VALIDITY`, 30 days) and renewed once a third of
its lifetime is left (10 days before it expires), checked every `CHECK_INTERVAL_S`; the
server reloads the new pair from its files (coordinator/server/tls.py) with members
connected. The CA is long-lived, so members' trust (the CA bundle they mount) does not
change on renewal. Certificates are made by the project's one `CertificateAuthority`.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from coordinator.server.tls import TlsFiles
from staticfleet.kafka.pki import CertificateAuthority, KeyPair, name

log = logging.getLogger(__name__)

VALIDITY: Final = datetime.timedelta(days=30)
RENEW_WHEN_LEFT: Final = 1 / 3  # of the lifetime
CHECK_INTERVAL_S: Final = 3600.0


def renewal_due(cert: x509.Certificate, now: datetime.datetime) -> bool:
    """True once less than a third of the certificate's lifetime is left (or it is not
    valid yet: a clock step, or a certificate from elsewhere)."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    if now < start:
        return True
    return now >= end - (end - start) * RENEW_WHEN_LEFT


@dataclass(frozen=True, slots=True)
class ServingCertIssuer:
    """Issues `out_dir/tls.crt` and `tls.key` for `dns_names` from the CA in `ca_dir`
    (`ca.crt`, `ca.key`: PEM)."""

    ca_dir: Path
    out_dir: Path
    dns_names: tuple[str, ...]
    validity: datetime.timedelta = VALIDITY

    def __post_init__(self) -> None:
        if not self.dns_names:
            raise ValueError("the coordinator's serving certificate needs at least one DNS name")

    @property
    def files(self) -> TlsFiles:
        return TlsFiles(self.out_dir / "tls.crt", self.out_dir / "tls.key")

    def _authority(self) -> CertificateAuthority:
        pair = KeyPair(self.ca_dir / "ca.crt", self.ca_dir / "ca.key")
        try:
            cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
            key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot read the coordinator CA in {self.ca_dir}: {error}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError(f"{pair.key}: not an EC or RSA private key")
        return CertificateAuthority(pair, key, cert)

    def _current(self) -> x509.Certificate | None:
        try:
            return x509.load_pem_x509_certificate(self.files.cert_file.read_bytes())
        except (OSError, ValueError):
            return None

    def ensure(self, now: datetime.datetime | None = None) -> bool:
        """Issue a new pair when there is none, it is due for renewal, or another CA issued
        it; True when it did. Raises ValueError when the CA cannot be read."""
        now = now or datetime.datetime.now(datetime.UTC)
        authority = self._authority()
        current = self._current()
        if (
            current is not None
            and current.issuer == authority.cert.subject
            and not renewal_due(current, now)
        ):
            return False
        # Issued beside the files, then moved over them: the server's reload never reads a
        # new certificate with the old key for long (it retries when the key changes too).
        staging = self.out_dir / ".next"
        staging.mkdir(parents=True, exist_ok=True)
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in self.dns_names]
        pair = authority.issue(
            staging,
            "tls",
            name(self.dns_names[0][:64]),
            server=True,
            sans=sans,
            valid_until=now + self.validity,
        )
        os.replace(pair.key, self.files.key_file)
        os.replace(pair.cert, self.files.cert_file)
        shutil.rmtree(staging, ignore_errors=True)
        log.info(
            "coordinator TLS: issued a serving certificate for %s, valid until %s",
            ", ".join(self.dns_names),
            (now + self.validity).isoformat(timespec="seconds"),
        )
        return True


async def renew_periodically(
    issuer: ServingCertIssuer,
    interval_s: float = CHECK_INTERVAL_S,
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
) -> None:
    """`issuer.ensure()` every `interval_s` until cancelled; a failure is logged and tried
    again next time (the current pair keeps serving until it expires)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            issuer.ensure(now())
        except Exception:
            log.exception("coordinator TLS: renewing the serving certificate failed")
