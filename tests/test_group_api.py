"""Everything that speaks the member protocol implements `GroupApi` (mypy checks the
assignments below: a changed signature anywhere fails `make lint`), and the route table
serves each operation."""

from __future__ import annotations

import inspect

from coordinator import GroupCoordinator
from coordinator.api import OPERATION_IDS, GroupApi
from coordinator.client.http import HttpTransport
from coordinator.client.inprocess import InProcessTransport
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.client.transport import Transport
from coordinator.server.routes import OPERATIONS
from tests.client.helpers import FaultyTransport

# mypy checks that each class implements GroupApi (a changed signature fails `make lint`).
IMPLEMENTATIONS: tuple[type[GroupApi], ...] = (
    GroupCoordinator,
    HttpTransport,
    InProcessTransport,
    KafkaTransport,
    FaultyTransport,
)


def as_group_api(coordinator: GroupCoordinator, transport: Transport) -> list[GroupApi]:
    """A member's Transport is a GroupApi too (mypy checks; never called)."""
    return [coordinator, InProcessTransport(coordinator), transport]


def test_group_api_has_the_six_member_operations() -> None:
    methods = {
        name
        for name, member in inspect.getmembers(GroupApi, inspect.isfunction)
        if not name.startswith("_")
    }
    assert methods == set(OPERATION_IDS)


def test_each_operation_has_its_route() -> None:
    routes = {operation.operation_id: operation for operation in OPERATIONS}
    for method, operation_id in OPERATION_IDS.items():
        operation = routes[operation_id]
        assert operation.method == "POST", method
        assert operation.path.startswith("/v1/groups/{group_id}/"), method


def test_every_implementation_has_every_operation() -> None:
    for cls in IMPLEMENTATIONS:
        for method in OPERATION_IDS:
            assert inspect.iscoroutinefunction(getattr(cls, method)), (cls, method)
