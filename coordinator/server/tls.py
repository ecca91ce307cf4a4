"""TLS for the coordinator's HTTP: a serving certificate read from files, reloaded when the
files change.

Kubernetes updates a mounted Secret in place (cert-manager renews `tls.crt`/`tls.key`, or
the operator rotates the pair it generated; docs/server.md, "TLS"), so the server watches
the files and swaps the certificate without a restart: connections already open keep the
session they negotiated, and every new handshake gets the new pair. The swap goes through
the listening context's SNI callback (called for every ClientHello, with or without a
server name), which points the handshake at the newest loaded context; a pair that fails to
load (half written, mismatched) is logged and the previous one keeps serving.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_RELOAD_INTERVAL_S = 10.0


class TlsConfigError(ValueError):
    """The serving certificate or key cannot be used; the message names the file and why."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """A serving certificate (PEM, the chain after the leaf) and its private key (PEM)."""

    cert_file: Path
    key_file: Path

    @classmethod
    def optional(cls, cert_file: Path | None, key_file: Path | None, flags: str) -> TlsFiles | None:
        """The pair when both are given, None when neither is (plain HTTP); only one of
        them is a `TlsConfigError` that names the two `flags`."""
        if cert_file is None and key_file is None:
            return None
        if cert_file is None or key_file is None:
            raise TlsConfigError(f"{flags} go together")
        return cls(cert_file, key_file)


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """A server context serving `files`; `TlsConfigError` when they cannot be loaded."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    for path in (files.cert_file, files.key_file):
        if not path.is_file():
            raise TlsConfigError(f"TLS file {path} does not exist or is not a file")
    try:
        context.load_cert_chain(str(files.cert_file), str(files.key_file))
    except ssl.SSLError as error:
        raise TlsConfigError(
            f"cannot use {files.cert_file} with {files.key_file} as a serving certificate: "
            f"{error.reason or error} (PEM files; the key must match the certificate)"
        ) from None
    except OSError as error:
        raise TlsConfigError(f"cannot read the TLS files: {error}") from None
    return context


def fingerprint(files: TlsFiles) -> bytes | None:
    """A digest of both files' bytes (None while either cannot be read)."""
    digest = hashlib.sha256()
    try:
        for path in (files.cert_file, files.key_file):
            digest.update(path.read_bytes())
            digest.update(b"\0")
    except OSError:
        return None
    return digest.digest()


def certificate_not_after(cert_file: Path) -> float | None:
    """When the first certificate in `cert_file` (the leaf) expires, in Unix seconds; None
    when it cannot be read or `cryptography` is not installed (the standard library's ssl
    cannot parse a certificate it is not verifying). The operator's image has it."""
    try:
        from cryptography import x509
    except ImportError:
        return None
    try:
        leaf = x509.load_pem_x509_certificate(cert_file.read_bytes())
    except (OSError, ValueError):
        return None
    return leaf.not_valid_after_utc.timestamp()


class ReloadingTls:
    """The context to listen with (`context`) and the reload of its certificate.

    `reload_if_changed()` loads the files again when their bytes changed; `watch()` calls it
    every `interval_s` until cancelled. `not_after` is when the serving certificate expires
    (the coordinator's /metrics exports it, for the expiry alert).
    """

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self.context = server_context(files)
        self._current = self.context
        self._fingerprint = fingerprint(files)
        self.reloads = 0
        self.not_after = certificate_not_after(files.cert_file)
        self.context.sni_callback = self._choose

    def _choose(
        self, connection: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _context: ssl.SSLContext
    ) -> None:
        if self._current is not self.context:
            connection.context = self._current
        return None

    def reload_if_changed(self) -> bool:
        """True when a new pair was loaded; a pair that fails to load keeps the old one."""
        current = fingerprint(self.files)
        if current is None or current == self._fingerprint:
            return False
        try:
            context = server_context(self.files)
        except TlsConfigError as error:
            # Kubernetes swaps both files at once; a failure here is a bad Secret, not a race.
            log.error("TLS: keeping the previous certificate: %s", error)
            self._fingerprint = current  # logged once per change, not every interval
            return False
        self._current = context
        self._fingerprint = current
        self.reloads += 1
        self.not_after = certificate_not_after(self.files.cert_file)
        log.info("TLS: loaded a new serving certificate from %s", self.files.cert_file)
        return True

    async def watch(self, interval_s: float = DEFAULT_RELOAD_INTERVAL_S) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.reload_if_changed()
            except Exception:  # the watch must outlive a surprise; the old pair serves on
                log.exception("TLS: reloading the certificate failed")


def is_loopback(host: str) -> bool:
    """True for an address (or `localhost`) that only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plain_http_problem(host: str, *, tls: bool, insecure_http: bool) -> str | None:
    """Why the server must not start on plain HTTP (None: it may).

    Plain HTTP sends bearer tokens readable by anyone on the network, so it needs asking for
    (`--insecure-http`), except on a loopback address, where nothing crosses a network (the
    demo, tests, a sidecar)."""
    if tls or insecure_http or is_loopback(host):
        return None
    return (
        f"refusing to serve plain HTTP on {host}: tokens would cross the network readable. "
        "Give --tls-cert-file and --tls-key-file, or pass --insecure-http to serve plain HTTP "
        "anyway"
    )
