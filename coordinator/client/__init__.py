"""The member side of the group protocol: `GroupMember` over a `Transport`.

    member = GroupMember(HttpTransport(url, token), MemberConfig(group_id, topics), listener)
    await member.start()
    partitions = await member.wait_for_assignment(timeout=30)
    ...
    await member.close()

See docs/client.md for the state machine, the protocols and the environment names.
"""

from typing import TYPE_CHECKING

from coordinator.lazy_exports import lazy_exports

# Each name below is imported from its module when first used (coordinator/lazy_exports.py),
# so a process imports only the modules it uses. mypy reads the imports; tests/cli/
# test_start_imports.py checks that they, `_EXPORTS` and `__all__` name the same.
if TYPE_CHECKING:
    from coordinator.client.config import MemberConfig, RebalanceProtocolSetting
    from coordinator.client.http import HttpTransport
    from coordinator.client.inprocess import InProcessTransport
    from coordinator.client.listener import NoopRebalanceListener, Partitions, RebalanceListener
    from coordinator.client.member import GroupMember, MemberClosedError, MemberFailure
    from coordinator.client.member_state import MemberState
    from coordinator.client.strategy import ConfigurationError
    from coordinator.client.transport import RequestTooLargeError, Transport, TransportError

_EXPORTS: dict[str, tuple[str, ...]] = {
    "coordinator.client.config": ("MemberConfig", "RebalanceProtocolSetting"),
    "coordinator.client.http": ("HttpTransport",),
    "coordinator.client.inprocess": ("InProcessTransport",),
    "coordinator.client.listener": ("NoopRebalanceListener", "Partitions", "RebalanceListener"),
    "coordinator.client.member": ("GroupMember", "MemberClosedError", "MemberFailure"),
    "coordinator.client.member_state": ("MemberState",),
    "coordinator.client.strategy": ("ConfigurationError",),
    "coordinator.client.transport": ("RequestTooLargeError", "Transport", "TransportError"),
}
__getattr__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "ConfigurationError",
    "GroupMember",
    "HttpTransport",
    "InProcessTransport",
    "MemberClosedError",
    "MemberConfig",
    "MemberFailure",
    "MemberState",
    "NoopRebalanceListener",
    "Partitions",
    "RebalanceListener",
    "RebalanceProtocolSetting",
    "RequestTooLargeError",
    "Transport",
    "TransportError",
]
