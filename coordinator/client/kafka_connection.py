"""One asyncio connection to a Kafka broker, speaking Kafka's wire protocol.

The encoding, framing and decoding are kafka-python's (`kafka.protocol`: the request and
response classes generated from Kafka's JSON schemas, and `KafkaProtocol`, its sans-I/O
framer); this module only moves those bytes over an asyncio stream and picks the versions.

A Kafka broker answers the requests of one connection in order and reads the next request
only after it answered the previous one, so a long-polling JoinGroup holds its connection
for up to a rebalance timeout: a caller that must heartbeat meanwhile uses a second
connection (`KafkaTransport` does).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from kafka.errors import KafkaError
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.parser import KafkaProtocol

from coordinator.client.transport import TransportError


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
    later and be read as the answer of the next one.
    """

    def __init__(self, address: BrokerAddress, client_id: str) -> None:
        self.address = address
        self._client_id = client_id
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
        if self._writer is not None:
            return
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.address.host, self.address.port), timeout_s
            )
        except (OSError, TimeoutError) as error:
            raise TransportError(f"cannot connect to broker {self.address}: {error}") from error
        self._protocol = KafkaProtocol(client_id=self._client_id)
        request = ApiVersionsRequest[3](
            client_software_name="staticfleet", client_software_version="1"
        )
        response = await self._exchange(request, timeout_s)
        if response.error_code != 0:
            self.close()
            raise TransportError(f"ApiVersions refused by {self.address}: {response.error_code}")
        self._versions = {
            int(key.api_key): (int(key.min_version), int(key.max_version))
            for key in response.api_keys
        }

    async def _exchange(self, request: Any, timeout_s: float) -> Any:
        assert self._reader is not None and self._writer is not None
        try:
            self._protocol.send_request(request)
            self._writer.write(self._protocol.send_bytes())
            return await asyncio.wait_for(self._receive(self._reader), timeout_s)
        except TimeoutError as error:
            self.close()
            raise TransportError(
                f"{type(request).__name__} to {self.address}: no answer in {timeout_s:.1f}s"
            ) from error
        except (OSError, EOFError, ValueError, KafkaError) as error:
            self.close()
            raise TransportError(
                f"{type(request).__name__} to {self.address}: {type(error).__name__}: {error}"
            ) from error
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
