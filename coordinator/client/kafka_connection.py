"""One asyncio connection to a Kafka broker, speaking Kafka's wire protocol.

The encoding, framing and decoding are kafka-python's (`kafka.protocol`: the request and
response classes generated from Kafka's JSON schemas, and `KafkaProtocol`, its sans-I/O
framer); this module only moves those bytes over an asyncio stream and picks the versions.

A Kafka broker answers the requests of one connection in order and reads the next request
only after it answered the previous one, so a long-polling JoinGroup holds its connection
for up to a rebalance timeout: a caller that must heartbeat meanwhile uses a second
connection (`KafkaTransport` does).

Security (docs/kafka.md, "Secured clusters"): each connection does TLS (when the settings'
protocol has it), then ApiVersions, then SaslHandshake and SaslAuthenticate (when it has
SASL), in the order of Kafka's own client; kafka_security.py does the TLS context and the
SASL exchange. A refusal (certificate, credentials, mechanism) is a `KafkaAccessError`, never
a `TransportError`. When the broker limits a SASL session (`connections.max.reauth.ms`,
KIP-368), the connection is closed and opened again (a fresh authentication) before the
session ends, instead of re-authenticating in band: the broker would otherwise close it
on the first request after the session expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from dataclasses import dataclass
from typing import Any

from kafka.errors import KafkaError
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.parser import KafkaProtocol

from coordinator.client.kafka_errors import KafkaAccessError
from coordinator.client.kafka_security import (
    OAuthTokenProvider,
    not_tls_hint,
    sasl_authenticate,
    tls_access_error,
    tls_context,
)
from coordinator.client.kafka_settings import (
    PLAINTEXT_SETTINGS,
    KafkaClientSettings,
    SaslMechanism,
)
from coordinator.client.transport import TransportError

# Open a new connection when this much of a SASL session's lifetime has passed (KIP-368).
SESSION_RENEW_AT = 0.85


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class KafkaConnection:
    """A connection that sends one request at a time and waits for its answer.

    Every failure (refused, reset, timed out, undecodable answer) closes the connection and
    raises `TransportError`; so does a cancelled request, because its answer would arrive
    later and be read as the answer of the next one. A refused TLS handshake or SASL
    authentication closes it and raises the `KafkaAccessError` that says why.
    """

    def __init__(
        self,
        address: BrokerAddress,
        client_id: str,
        *,
        settings: KafkaClientSettings = PLAINTEXT_SETTINGS,
        token_provider: OAuthTokenProvider | None = None,
    ) -> None:
        self.address = address
        self._client_id = client_id
        self._settings = settings
        self._token_provider = token_provider
        if settings.sasl_mechanism is SaslMechanism.OAUTHBEARER and token_provider is None:
            self._token_provider = OAuthTokenProvider(settings)
        # monotonic time after which the next request opens a new connection (0: never)
        self._renew_at = 0.0
        # requests answered on this connection after its set-up (for the protocol hint)
        self._answered = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._protocol: Any = None
        # api key -> highest version the broker accepts
        self._versions: dict[int, tuple[int, int]] = {}
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._writer is not None

    def version(self, request_class: Any, wanted: int, minimum: int = 0) -> int:
        """The version to send: the highest both we (`wanted`) and the broker accept."""
        low, high = self._versions.get(request_class.API_KEY, (0, -1))
        version = min(wanted, high, request_class.max_version)
        if version < max(low, minimum):
            raise TransportError(
                f"broker {self.address} does not support {request_class.__name__} "
                f"v{max(low, minimum)}..v{wanted} (it accepts v{low}..v{high})"
            )
        return int(version)

    async def connect(self, timeout_s: float) -> None:
        async with self._lock:
            await self._connect(timeout_s)

    async def send(
        self,
        request_class: Any,
        versions: tuple[int, int],
        fields: dict[str, Any],
        timeout_s: float,
    ) -> Any:
        """Connect if needed, send `request_class` at the highest version both sides accept
        within `versions` (lowest, wanted), and return the decoded response.

        One request at a time: the lock covers connecting (the version negotiation), the
        write and the read, so concurrent callers never interleave on the stream.
        """
        async with self._lock:
            await self._connect(timeout_s)
            version = self.version(request_class, versions[1], versions[0])
            return await self._exchange(request_class[version](**fields), timeout_s)

    async def _connect(self, timeout_s: float) -> None:
        if self._writer is not None and self._renew_at and time.monotonic() >= self._renew_at:
            self.close()  # the SASL session is about to end: authenticate afresh
        if self._writer is not None:
            return
        context = tls_context(self._settings)
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(
                    self.address.host,
                    self.address.port,
                    ssl=context,
                    server_hostname=self.address.host if context is not None else None,
                ),
                timeout_s,
            )
        except ssl.SSLError as error:
            raise self._tls_failure(error) from None
        except (OSError, TimeoutError) as error:
            hint = not_tls_hint(error) if context is not None else ""
            raise TransportError(
                f"cannot connect to broker {self.address}: {error}{hint}"
            ) from error
        self._protocol = KafkaProtocol(client_id=self._client_id)
        self._answered = 0
        self._renew_at = 0.0
        try:
            request = ApiVersionsRequest[3](
                client_software_name="staticfleet", client_software_version="1"
            )
            response = await self._exchange(request, timeout_s)
            if response.error_code != 0:
                raise TransportError(
                    f"ApiVersions refused by {self.address}: {response.error_code}"
                )
            self._versions = {
                int(key.api_key): (int(key.min_version), int(key.max_version))
                for key in response.api_keys
            }
            if self._settings.security_protocol.uses_sasl:
                lifetime_ms = await sasl_authenticate(
                    lambda request: self._exchange(request, timeout_s),
                    self.version,
                    self._settings,
                    str(self.address),
                    self._token_provider.token if self._token_provider is not None else None,
                )
                if lifetime_ms > 0:
                    self._renew_at = time.monotonic() + SESSION_RENEW_AT * lifetime_ms / 1000
        except BaseException:
            self.close()
            raise

    def _tls_failure(self, error: ssl.SSLError) -> Exception:
        self.close()
        access = tls_access_error(error, str(self.address), self._settings)
        if access is not None:
            return access
        return TransportError(
            f"TLS with broker {self.address} failed: {error}{not_tls_hint(error)}"
        )

    def _closed_hint(self) -> str:
        """Why a broker may close a connection we just opened: the wrong protocol."""
        if self._answered > 1:
            return ""
        if not self._settings.security_protocol.uses_tls:
            return (
                " right after it was opened (is the listener SSL or SASL? check security.protocol)"
            )
        return " right after it was opened (check security.protocol)"

    async def _exchange(self, request: Any, timeout_s: float) -> Any:
        assert self._reader is not None and self._writer is not None
        try:
            self._protocol.send_request(request)
            self._writer.write(self._protocol.send_bytes())
            answer = await asyncio.wait_for(self._receive(self._reader), timeout_s)
            self._answered += 1
            return answer
        except TimeoutError as error:
            self.close()
            raise TransportError(
                f"{type(request).__name__} to {self.address}: no answer in {timeout_s:.1f}s"
                f"{self._closed_hint() if self._answered == 0 else ''}"
            ) from error
        except ssl.SSLError as error:
            # TLS 1.3: the broker checks our certificate after our side of the handshake
            # is done, so its refusal arrives as an alert on the first read.
            raise self._tls_failure(error) from None
        except EOFError as error:
            self.close()
            raise TransportError(
                f"{type(request).__name__} to {self.address}: the broker closed the "
                f"connection{self._closed_hint()}"
            ) from error
        except (OSError, ValueError, KafkaError) as error:
            self.close()
            raise TransportError(
                f"{type(request).__name__} to {self.address}: {type(error).__name__}: {error}"
                f"{self._closed_hint()}"
            ) from error
        except KafkaAccessError:
            self.close()
            raise
        except BaseException:
            # Cancelled (or a kafka-python decode error): the stream is no longer in step.
            self.close()
            raise

    async def _receive(self, reader: asyncio.StreamReader) -> Any:
        while True:
            data = await reader.read(65536)
            if not data:
                raise EOFError("the broker closed the connection")
            responses = self._protocol.receive_bytes(data)
            if responses:
                return responses[0][1]

    def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
