"""The member side of the group protocol: `GroupMember` over a `Transport`.

    member = GroupMember(HttpTransport(url, token), MemberConfig(group_id, topics), listener)
    await member.start()
    partitions = await member.wait_for_assignment(timeout=30)
    ...
    await member.close()

See docs/client.md for the state machine, the protocols and the environment names.
"""

from coordinator.client.config import MemberConfig, RebalanceProtocolSetting
from coordinator.client.http import HttpTransport
from coordinator.client.inprocess import InProcessTransport
from coordinator.client.listener import NoopRebalanceListener, Partitions, RebalanceListener
from coordinator.client.member import GroupMember, MemberClosedError, MemberFailure
from coordinator.client.member_state import MemberState
from coordinator.client.strategy import ConfigurationError
from coordinator.client.transport import RequestTooLargeError, Transport, TransportError

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
