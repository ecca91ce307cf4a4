"""Everything that speaks the member protocol implements `GroupApi` (mypy checks the
assignments below: a changed signature anywhere fails `make lint`), and the route table
serves exactly its operations, each with a handler of the method's name."""

from __future__ import annotations

import inspect

from coordinator import GroupCoordinator
from coordinator.api import OPERATION_IDS, GroupApi
from coordinator.client.http import HttpTransport
from coordinator.client.inprocess import InProcessTransport
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.client.transport import Transport
from coordinator.server.routes import OPERATIONS
from staticfleet.member.cluster_metadata import ClusterTopicMetadata
from tests.client.helpers import FaultyTransport

# mypy checks that each class implements GroupApi (a changed signature fails `make lint`).
IMPLEMENTATIONS: tuple[type[GroupApi], ...] = (
    GroupCoordinator,
    HttpTransport,
    InProcessTransport,
    KafkaTransport,
    FaultyTransport,
    ClusterTopicMetadata,
)

MEMBER_PROTOCOL = "member protocol"


def as_group_api(coordinator: GroupCoordinator, transport: Transport) -> list[GroupApi]:
    """A member's Transport is a GroupApi too (mypy checks; never called)."""
    return [coordinator, InProcessTransport(coordinator), transport]


def group_api_methods() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(GroupApi, inspect.isfunction)
        if not name.startswith("_")
    }


def test_group_api_has_the_eight_operations_the_coordinator_serves() -> None:
    assert set(group_api_methods()) == set(OPERATION_IDS)
    assert len(OPERATION_IDS) == 8


def test_the_route_tables_member_protocol_is_the_group_api() -> None:
    member_routes = {op.operation_id: op for op in OPERATIONS if op.tag == MEMBER_PROTOCOL}
    assert set(member_routes) == set(OPERATION_IDS.values())
    for method, operation_id in OPERATION_IDS.items():
        operation = member_routes[operation_id]
        # One name: the route's handler is named as the GroupApi method it serves.
        assert operation.handler.__name__ == method, operation_id
        if operation.request_body is not None:
            assert operation.method == "POST", method
            assert operation.path.startswith("/v1/groups/{group_id}/"), method
            parameter = list(group_api_methods()[method].parameters.values())[1]
            assert parameter.annotation == operation.request_body.__name__, method


def test_every_implementation_has_every_operation_with_its_signature() -> None:
    expected = group_api_methods()
    for cls in IMPLEMENTATIONS:
        for method, signature in expected.items():
            implementation = getattr(cls, method)
            assert inspect.iscoroutinefunction(implementation), (cls, method)
            names = list(inspect.signature(implementation).parameters)
            assert names == list(signature.parameters), (cls, method)
