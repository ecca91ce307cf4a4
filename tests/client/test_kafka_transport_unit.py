"""KafkaTransport's pure parts: bootstrap parsing, error mapping, version choice."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.consumer.group import HeartbeatRequest, HeartbeatResponse, JoinGroupRequest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from coordinator.client.kafka_connection import BrokerAddress, KafkaConnection
from coordinator.client.kafka_transport import (
    COORDINATOR_ERRORS,
    KafkaTransport,
    error_code,
    parse_bootstrap,
)
from coordinator.client.transport import TransportError
from coordinator.errors import ErrorCode


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


async def test_concurrent_requests_on_one_connection_never_interleave() -> None:
    """Two callers on one connection: the second waits for the first's answer (and for the
    version negotiation), as a broker reads one request per connection at a time."""
    frames: list[tuple[int, int]] = []  # (api key, correlation id) in arrival order

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                size = int.from_bytes(await reader.readexactly(4), "big")
            except asyncio.IncompleteReadError:
                return
            body = await reader.readexactly(size)
            api_key = int.from_bytes(body[0:2], "big")
            correlation = int.from_bytes(body[4:8], "big")
            frames.append((api_key, correlation))
            await asyncio.sleep(0.05)  # slow broker: a second request would overtake
            if api_key == ApiVersionsRequest.API_KEY:
                key = ApiVersionsResponse.ApiVersion
                answer = ApiVersionsResponse[3](
                    error_code=0,
                    api_keys=[key(api_key=HeartbeatRequest.API_KEY, min_version=0, max_version=4)],
                )
            else:
                answer = HeartbeatResponse[4](error_code=27)
            answer.with_header(correlation_id=correlation)
            payload = answer.encode(header=True)
            writer.write(len(payload).to_bytes(4, "big") + payload)
            await writer.drain()

    server = await asyncio.start_server(broker, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connection = KafkaConnection(BrokerAddress("127.0.0.1", port), "test")
    fields = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
    answers = await asyncio.gather(
        connection.send(HeartbeatRequest, (3, 4), fields, 5),
        connection.send(HeartbeatRequest, (3, 4), fields, 5),
    )
    assert [a.error_code for a in answers] == [27, 27]
    assert [key for key, _ in frames] == [ApiVersionsRequest.API_KEY] + [
        HeartbeatRequest.API_KEY
    ] * 2
    connection.close()
    server.close()
    await server.wait_closed()
