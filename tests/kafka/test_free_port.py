"""`free_port`: a port no process holds on any address (no broker needed)."""

from __future__ import annotations

import socket

import pytest

from staticfleet.kafka.broker import BrokerError, free_port


def test_a_port_held_on_one_loopback_address_is_not_free() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.137", 0))  # as a client bound to a source address holds one
        port = held.getsockname()[1]
        with pytest.raises(BrokerError, match="no free port"):
            free_port(port, port + 1)
    assert free_port(port, port + 1) == port


def test_taken_ports_are_never_given() -> None:
    ports: list[int] = []
    for _ in range(20):
        ports.append(free_port(20000, 20030, taken=ports))
    assert len(set(ports)) == 20
