"""A small OIDC provider for the secured test broker's OAUTHBEARER (docs/kafka.md).

Two endpoints on loopback, plain HTTP:

- `POST /token`: the client-credentials grant (RFC 6749 section 4.4). The client authenticates
  with HTTP Basic or with `client_id`/`client_secret` form fields; the answer is an RS256 JWT
  access token with `iss`, `sub` (the client id, so the Kafka principal is `User:<client id>`),
  `aud`, `iat`, `exp` and `scope`, plus `expires_in`.
- `GET /jwks`: the public key, which the broker's `OAuthBearerValidatorCallbackHandler` uses.

and `GET /stats` (tokens issued per client), so a test can see that a client refreshed its
token. Clients live in `oidc-clients.json` in the work directory, read on each request, so a
test adds one (`OidcProvider.add_client`, with a short token lifetime to test refresh) without
restarting anything. The signing key is kept in the work directory across restarts.

JWTs are signed with `cryptography` directly: an RS256 JWS is a base64url header and payload
and a PKCS#1 v1.5 SHA-256 signature, a few lines, where PyJWT would be one more dependency of
the `kafka` extra for no other use.

Run as `python -m staticfleet.kafka.oidc --port P --workdir D`; KafkaBroker starts it before
the JVM and stops it after.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import json
import os
import secrets
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

from aiohttp import web
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

AUDIENCE = "kafka"
DEFAULT_SCOPE = "kafka"
DEFAULT_LIFETIME = 3600
CLIENTS_FILE = "oidc-clients.json"
KEY_FILE = "oidc-signing.key"


def issuer(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_uint(value: int) -> str:
    return _b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


def load_or_create_key(path: Path) -> rsa.RSAPrivateKey:
    if path.exists():
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError(f"{path}: not an RSA private key")
        return key
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return key


def key_id(key: rsa.RSAPublicKey) -> str:
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _b64url(hashlib.sha256(der).digest()[:12])


def jwks(key: rsa.RSAPublicKey) -> dict[str, Any]:
    numbers = key.public_numbers()
    return {
        "keys": [
            {
                "kty": "RSA",
                "use": "sig",
                "alg": "RS256",
                "kid": key_id(key),
                "n": _b64url_uint(numbers.n),
                "e": _b64url_uint(numbers.e),
            }
        ]
    }


def sign_jwt(key: rsa.RSAPrivateKey, claims: dict[str, Any]) -> str:
    """An RS256 JWS compact serialization (RFC 7515) of `claims`."""
    header = {"alg": "RS256", "typ": "JWT", "kid": key_id(key.public_key())}
    signing_input = ".".join(
        _b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    )
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64url(signature)}"


def token_claims(
    *, iss: str, client_id: str, scope: str, lifetime: int, now: float, audience: str = AUDIENCE
) -> dict[str, Any]:
    issued = int(now)
    return {
        "iss": iss,
        "sub": client_id,
        "aud": audience,
        "iat": issued,
        "exp": issued + lifetime,
        "scope": scope,
        "jti": secrets.token_hex(8),
    }


@dataclass(frozen=True)
class Client:
    secret: str
    lifetime: int = DEFAULT_LIFETIME
    # Another audience makes tokens the broker refuses: the provider says yes, Kafka says no.
    audience: str = AUDIENCE


def read_clients(workdir: Path) -> dict[str, Client]:
    path = workdir / CLIENTS_FILE
    if not path.exists():
        return {}
    raw: dict[str, dict[str, Any]] = json.loads(path.read_text())
    return {
        client_id: Client(
            str(entry["secret"]),
            int(entry.get("lifetime", DEFAULT_LIFETIME)),
            str(entry.get("audience", AUDIENCE)),
        )
        for client_id, entry in raw.items()
    }


def write_clients(workdir: Path, clients: dict[str, Client]) -> None:
    path = workdir / CLIENTS_FILE
    temporary = path.with_suffix(".tmp")
    temporary.write_text(
        json.dumps(
            {
                cid: {"secret": c.secret, "lifetime": c.lifetime, "audience": c.audience}
                for cid, c in clients.items()
            },
            indent=1,
        )
    )
    temporary.replace(path)  # atomic: the server never reads half a file


def client_credentials(request_headers: Any, form: Any) -> tuple[str, str] | None:
    """(client id, secret) from HTTP Basic (RFC 6749 2.3.1) or from the form's fields."""
    authorization = request_headers.get("Authorization", "")
    if authorization.lower().startswith("basic "):
        try:
            decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        client_id, sep, secret = decoded.partition(":")
        if not sep:
            return None
        # RFC 6749 2.3.1: both parts are form-urlencoded before Basic encoding.
        return unquote_plus(client_id), unquote_plus(secret)
    if "client_id" in form and "client_secret" in form:
        return str(form["client_id"]), str(form["client_secret"])
    return None


def _error(status: int, error: str, description: str) -> web.Response:
    return web.json_response({"error": error, "error_description": description}, status=status)


def make_app(workdir: Path, port: int) -> web.Application:
    key = load_or_create_key(workdir / KEY_FILE)
    public_jwks = jwks(key.public_key())
    issued: Counter[str] = Counter()

    async def token(request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("grant_type") != "client_credentials":
            return _error(400, "unsupported_grant_type", "only client_credentials is supported")
        credentials = client_credentials(request.headers, form)
        if credentials is None:
            return _error(401, "invalid_client", "no client credentials (Basic or form)")
        client_id, secret = credentials
        client = read_clients(workdir).get(client_id)
        if client is None or not secrets.compare_digest(client.secret, secret):
            return _error(401, "invalid_client", "unknown client or wrong secret")
        scope = str(form.get("scope") or DEFAULT_SCOPE)
        claims = token_claims(
            iss=issuer(port),
            client_id=client_id,
            scope=scope,
            lifetime=client.lifetime,
            now=time.time(),
            audience=client.audience,
        )
        issued[client_id] += 1
        return web.json_response(
            {
                "access_token": sign_jwt(key, claims),
                "token_type": "Bearer",
                "expires_in": client.lifetime,
                "scope": scope,
            },
            headers={"Cache-Control": "no-store"},
        )

    async def keys(_: web.Request) -> web.Response:
        return web.json_response(public_jwks)

    async def stats(_: web.Request) -> web.Response:
        return web.json_response({"issued": dict(issued)})

    app = web.Application()
    app.router.add_post("/token", token)
    app.router.add_get("/jwks", keys)
    app.router.add_get("/stats", stats)
    return app


class OidcProvider:
    """The client side of a running provider: its URLs, its clients and its counters."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir = Path(workdir)
        self.port = port

    @property
    def issuer(self) -> str:
        return issuer(self.port)

    @property
    def token_endpoint_url(self) -> str:
        return f"{self.issuer}/token"

    @property
    def jwks_endpoint_url(self) -> str:
        return f"{self.issuer}/jwks"

    def add_client(
        self,
        client_id: str,
        secret: str,
        *,
        lifetime: int = DEFAULT_LIFETIME,
        audience: str = AUDIENCE,
    ) -> None:
        """Registers (or replaces) a client; the provider sees it on its next request.

        Its tokens last `lifetime` seconds; an `audience` other than the broker's makes tokens
        the broker refuses (a valid login at the provider, an authentication failure at Kafka).
        """
        if lifetime < 1:
            raise ValueError(f"token lifetime {lifetime}: must be at least 1 second")
        clients = read_clients(self.workdir)
        clients[client_id] = Client(secret, lifetime, audience)
        write_clients(self.workdir, clients)

    def tokens_issued(self, client_id: str) -> int:
        with urllib.request.urlopen(f"{self.issuer}/stats", timeout=5) as response:
            counts: dict[str, int] = json.load(response)["issued"]
        return counts.get(client_id, 0)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.jwks_endpoint_url, timeout=1) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m staticfleet.kafka.oidc")
    parser.add_argument("--port", type=int, required=True, help="loopback port to listen on")
    parser.add_argument("--workdir", type=Path, required=True, help="signing key and clients")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    web.run_app(
        make_app(args.workdir, args.port),
        host="127.0.0.1",
        port=args.port,
        print=None,
        access_log=None,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
