"""KafkaTransport's pure parts: bootstrap parsing, error mapping, version choice."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from coordinator.client.kafka_connection import BrokerAddress, KafkaConnection
from coordinator.client.kafka_transport import (
    COORDINATOR_ERRORS,
    KafkaTransport,
    error_code,
    parse_bootstrap,
)
from coordinator.client.transport import TransportError
from coordinator.errors import ErrorCode
from coordinator.messages import HeartbeatRequest as HeartbeatRequest_
from coordinator.messages import OffsetFetchRequest


def test_parse_bootstrap_reads_several_brokers_and_defaults_the_port() -> None:
    assert parse_bootstrap("kafka://a:1,b") == [BrokerAddress("a", 1), BrokerAddress("b", 9092)]
    assert parse_bootstrap("127.0.0.1:19092") == [BrokerAddress("127.0.0.1", 19092)]


@pytest.mark.parametrize("url", ["kafka://", "kafka://,", ""])
def test_parse_bootstrap_refuses_no_address(url: str) -> None:
    with pytest.raises(ValueError):
        parse_bootstrap(url)


def test_error_codes_keep_kafka_numbers_and_unknown_ones_become_server_errors() -> None:
    assert error_code(82) is ErrorCode.FENCED_INSTANCE_ID
    assert error_code(14) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert error_code(9999) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert ErrorCode.COORDINATOR_LOAD_IN_PROGRESS in COORDINATOR_ERRORS


def test_version_is_the_highest_both_sides_accept_and_never_below_the_minimum() -> None:
    connection = KafkaConnection(BrokerAddress("x", 1), "test")
    connection._versions = {JoinGroupRequest.API_KEY: (0, 7)}
    assert connection.version(JoinGroupRequest, 9, 5) == 7
    connection._versions = {JoinGroupRequest.API_KEY: (0, 4)}
    with pytest.raises(TransportError, match="JoinGroupRequest"):
        connection.version(JoinGroupRequest, 9, 5)


async def test_an_unreachable_cluster_is_a_retriable_transport_error() -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    transport = KafkaTransport("kafka://127.0.0.1:1", request_timeout_ms=2_000)
    with pytest.raises(TransportError, match="cannot connect"):
        await transport.topic_metadata()
    await transport.close()


class FakeBroker:
    """A loopback server answering Kafka frames with what `answer(api_key)` returns: enough
    broker to test the transport's framing, ordering and error handling."""

    def __init__(self, answer: Callable[[int, int], Any], delay_s: float = 0.0) -> None:
        self.answer = answer
        self.delay_s = delay_s
        self.frames: list[int] = []  # api keys in arrival order
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                size = int.from_bytes(await reader.readexactly(4), "big")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            body = await reader.readexactly(size)
            api_key = int.from_bytes(body[0:2], "big")
            correlation = int.from_bytes(body[4:8], "big")
            self.frames.append(api_key)
            await asyncio.sleep(self.delay_s)  # slow broker: a second request could overtake
            if api_key == ApiVersionsRequest.API_KEY:
                version = ApiVersionsResponse.ApiVersion
                answer = ApiVersionsResponse[3](
                    error_code=0,
                    api_keys=[
                        version(api_key=key, min_version=0, max_version=high)
                        for key, high in ((12, 4), (10, 6), (3, 12), (8, 9), (9, 9))
                    ],
                )
            else:
                answer = self.answer(api_key, self.port)
            answer.with_header(correlation_id=correlation)
            payload = answer.encode(header=True)
            writer.write(len(payload).to_bytes(4, "big") + payload)
            await writer.drain()


def coordinator_here(port: int) -> Any:
    return FindCoordinatorResponse[4](
        coordinators=[
            FindCoordinatorResponse.Coordinator(
                key="g", node_id=1, host="127.0.0.1", port=port, error_code=0, error_message=None
            )
        ]
    )


async def test_concurrent_requests_on_one_connection_never_interleave() -> None:
    """Two callers on one connection: the second waits for the first's answer (and for the
    version negotiation), as a broker reads one request per connection at a time."""
    async with FakeBroker(lambda key, port: HeartbeatResponse[4](error_code=27), 0.05) as broker:
        connection = KafkaConnection(BrokerAddress("127.0.0.1", broker.port), "test")
        fields = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
        answers = await asyncio.gather(
            connection.send(HeartbeatRequest, (3, 4), fields, 5),
            connection.send(HeartbeatRequest, (3, 4), fields, 5),
        )
        connection.close()
    assert [a.error_code for a in answers] == [27, 27]
    assert broker.frames == [ApiVersionsRequest.API_KEY] + [HeartbeatRequest.API_KEY] * 2


@pytest.mark.parametrize("code", [14, 15, 16])
async def test_a_moved_coordinator_is_forgotten_and_the_error_is_retriable(code: int) -> None:
    """NOT_COORDINATOR and friends: TransportError, then FindCoordinator again."""

    def answer(api_key: int, port: int) -> Any:
        if api_key == FindCoordinatorRequest.API_KEY:
            return coordinator_here(port)
        return HeartbeatResponse[4](error_code=code)

    async with FakeBroker(answer) as broker:
        transport = KafkaTransport(f"kafka://127.0.0.1:{broker.port}")
        request = HeartbeatRequest_(group_id="g", generation_id=1, member_id="m")
        for _ in range(2):
            with pytest.raises(TransportError, match=ErrorCode(code).name):
                await transport.heartbeat(request)
        await transport.close()
    finds = [key for key in broker.frames if key == FindCoordinatorRequest.API_KEY]
    assert len(finds) == 2  # one per attempt: the coordinator was forgotten in between


async def test_offset_fetch_group_level_not_coordinator_is_retriable() -> None:
    group = OffsetFetchResponse.OffsetFetchResponseGroup

    def answer(api_key: int, port: int) -> Any:
        if api_key == FindCoordinatorRequest.API_KEY:
            return coordinator_here(port)
        return OffsetFetchResponse[9](groups=[group(group_id="g", topics=[], error_code=16)])

    async with FakeBroker(answer) as broker:
        transport = KafkaTransport(f"kafka://127.0.0.1:{broker.port}")
        with pytest.raises(TransportError, match="NOT_COORDINATOR"):
            await transport.fetch_offsets(OffsetFetchRequest("g"))
        await transport.close()


async def test_a_cancelled_request_closes_its_connection() -> None:
    """Its answer would otherwise be read as the next request's."""
    async with FakeBroker(lambda key, port: HeartbeatResponse[4](error_code=0), 0.5) as broker:
        connection = KafkaConnection(BrokerAddress("127.0.0.1", broker.port), "test")
        await connection.connect(5)
        fields = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
        pending = asyncio.ensure_future(connection.send(HeartbeatRequest, (3, 4), fields, 5))
        await asyncio.sleep(0.1)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        assert not connection.connected
        answer = await connection.send(HeartbeatRequest, (3, 4), fields, 5)
        connection.close()
    assert answer.error_code == 0
