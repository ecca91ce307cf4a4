"""Partition assignors (docs/coordinator.md, "Assignors, compared with Kafka's"): Kafka's
range, roundrobin, sticky and cooperative-sticky, and our static-sticky.

    assignor = get_assignor("cooperative-sticky")
    assignment = assignor.assign(partitions_per_topic, subscriptions)   # on the leader
    assignor.on_assignment(assignment[my_member_id], generation_id)     # on each member
"""

from coordinator.assignors.base import PartitionAssignor, RebalanceProtocol
from coordinator.assignors.cooperative import (
    CooperativeAdjustment,
    adjust_for_cooperative,
    partitions_transferring_ownership,
)
from coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from coordinator.assignors.range_assignor import RangeAssignor
from coordinator.assignors.registry import ASSIGNOR_NAMES, get_assignor
from coordinator.assignors.roundrobin import RoundRobinAssignor
from coordinator.assignors.static_sticky import (
    VERSION_PROBING,
    StaticStickyAssignmentInfo,
    StaticStickyAssignor,
    StaticStickySubscriptionInfo,
    decode_assignment_info,
    decode_subscription_info,
    encode_assignment_info,
    encode_subscription_info,
)
from coordinator.assignors.sticky import StickyAssignor

__all__ = [
    "ASSIGNOR_NAMES",
    "VERSION_PROBING",
    "CooperativeAdjustment",
    "CooperativeStickyAssignor",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StaticStickyAssignmentInfo",
    "StaticStickyAssignor",
    "StaticStickySubscriptionInfo",
    "StickyAssignor",
    "adjust_for_cooperative",
    "decode_assignment_info",
    "decode_subscription_info",
    "encode_assignment_info",
    "encode_subscription_info",
    "get_assignor",
    "partitions_transferring_ownership",
]
