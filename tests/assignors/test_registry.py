"""get_assignor, names and protocols: the interface the coordinator and clients rely on."""

from __future__ import annotations

import pytest

from coordinator.assignors import (
    ASSIGNOR_NAMES,
    PartitionAssignor,
    RebalanceProtocol,
    get_assignor,
)
from coordinator.protocol import Subscription


def test_names() -> None:
    assert ASSIGNOR_NAMES == (
        "range",
        "roundrobin",
        "sticky",
        "cooperative-sticky",
        "static-sticky",
    )


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_get_assignor_returns_a_fresh_instance(name: str) -> None:
    first, second = get_assignor(name), get_assignor(name)
    assert isinstance(first, PartitionAssignor)
    assert first is not second
    assert first.name == name


@pytest.mark.parametrize(
    ("name", "protocols"),
    [
        ("range", (RebalanceProtocol.EAGER,)),
        ("roundrobin", (RebalanceProtocol.EAGER,)),
        ("sticky", (RebalanceProtocol.EAGER,)),
        ("cooperative-sticky", (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)),
        ("static-sticky", (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)),
    ],
)
def test_supported_protocols(name: str, protocols: tuple[RebalanceProtocol, ...]) -> None:
    assert get_assignor(name).supported_protocols == protocols


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="cooperative-sticky"):
        get_assignor("fancy")


def test_protocol_values() -> None:
    assert str(RebalanceProtocol.EAGER) == "eager"
    assert isinstance(RebalanceProtocol.COOPERATIVE, str)
    assert RebalanceProtocol("cooperative") is RebalanceProtocol.COOPERATIVE


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_every_member_appears_and_empty_inputs_work(name: str) -> None:
    assignor = get_assignor(name)
    assert assignor.assign({}, {}) == {}
    subs = {"a": Subscription(()), "b": Subscription(("missing",)), "c": Subscription(("t",))}
    result = assignor.assign({"t": 0}, subs)
    assert set(result) == {"a", "b", "c"}
    assert all(not a.partitions for a in result.values())


@pytest.mark.parametrize("name", ASSIGNOR_NAMES)
def test_more_members_than_partitions(name: str) -> None:
    subs = {f"m{i}": Subscription(("t",)) for i in range(5)}
    result = get_assignor(name).assign({"t": 3}, subs)
    assert sorted(len(a.partitions) for a in result.values()) == [0, 0, 1, 1, 1]
