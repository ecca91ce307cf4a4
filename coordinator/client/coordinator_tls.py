"""Members verify our coordinator's certificate: a CA bundle, and typed refusals.

`client_context(ca_file)` trusts only the given bundle (the `ca.crt` of the coordinator's
TLS Secret, mounted into member pods; docs/server.md, "TLS"). A certificate that fails
verification raises a `CoordinatorCertificateRefused` subclass naming why: untrusted (no
chain to the bundle, self-signed), a hostname mismatch, or expired (or not yet valid).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import ClassVar

from coordinator.client.access import AccessError

# OpenSSL's X509_V_ERR_* codes (x509_vfy.h) that say why a chain was refused.
_EXPIRED = frozenset({9, 10})  # CERT_NOT_YET_VALID, CERT_HAS_EXPIRED
_HOSTNAME = frozenset({62, 63, 64})  # HOSTNAME_MISMATCH, EMAIL_MISMATCH, IP_ADDRESS_MISMATCH


class CoordinatorTlsConfigError(ValueError):
    """The CA bundle cannot be used (missing, unreadable, no certificate in it)."""


class CoordinatorCertificateRefused(AccessError):
    """The coordinator's certificate did not verify; the subclass says why."""

    reason: ClassVar[str] = "CoordinatorCertificateRefused"
    problem: ClassVar[str] = "refused"

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(
            f"the coordinator at {url} presented a certificate this member refuses "
            f"({self.problem}): {detail}"
        )
        self.url = url
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.url, self.detail))


class CoordinatorCertificateUntrusted(CoordinatorCertificateRefused):
    reason = "CoordinatorCertificateUntrusted"
    problem = "untrusted: it does not chain to the CA bundle given with --coordinator-ca-file"


class CoordinatorHostnameMismatch(CoordinatorCertificateRefused):
    reason = "CoordinatorHostnameMismatch"
    problem = "hostname mismatch: it does not name the host in the coordinator URL"


class CoordinatorCertificateExpired(CoordinatorCertificateRefused):
    reason = "CoordinatorCertificateExpired"
    problem = "expired or not yet valid"


def client_context(ca_file: Path | None) -> ssl.SSLContext:
    """Verify the coordinator against `ca_file` (PEM), or the system's roots when None."""
    if ca_file is None:
        return ssl.create_default_context()
    if not ca_file.is_file():
        raise CoordinatorTlsConfigError(f"CA bundle {ca_file} does not exist or is not a file")
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except (ssl.SSLError, OSError) as error:
        raise CoordinatorTlsConfigError(
            f"CA bundle {ca_file} holds no usable PEM certificate: {error}"
        ) from None


def refusal(url: str, error: Exception) -> CoordinatorCertificateRefused:
    """The typed refusal for a failed verification (by OpenSSL's verify code; aiohttp
    hands over the `ssl.SSLCertVerificationError`)."""
    code = error.verify_code if isinstance(error, ssl.SSLCertVerificationError) else None
    detail = str(getattr(error, "verify_message", None) or error)
    if code in _EXPIRED:
        return CoordinatorCertificateExpired(url, detail)
    if code in _HOSTNAME:
        return CoordinatorHostnameMismatch(url, detail)
    return CoordinatorCertificateUntrusted(url, detail)
