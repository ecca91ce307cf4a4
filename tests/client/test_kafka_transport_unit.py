"""KafkaTransport's pure parts: bootstrap parsing, error mapping, version choice."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer.group import JoinGroupRequest

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
