"""`static-sticky`: our assignor for static-membership fleets.

- Sticky by identity: a member keeps its valid owned partitions (KIP-792 generation rules,
  see `ownership`); a member that owns nothing, typically a restarted static member that lost
  its memory (or any member under the eager protocol), gets back what the coordinator last
  assigned it (`last_assignment_by_member`, looked up by member id, then by
  `group.instance.id`, so it works whether or not the coordinator re-keyed the entry when it
  gave the instance a new member id).
- Balanced by capacity weights: a member of weight 2 gets about twice the partitions of a
  member of weight 1; a draining member gets nothing and hands its partitions over, which is
  what a scale-down wants before the pod goes (see `weighted`).
- Cooperative rule always applied (see `cooperative`): the assignor cannot know which
  protocol the group runs, and, as with Kafka's CooperativeStickyAssignor, the rule is a
  no-op under eager because eager members own nothing when they join.
- Versioned user data with KIP-268 version probing, so its format can change in a single
  rolling bounce.

User data, big-endian, with the version first so every version can read any version's
header:

    subscription v1 => version:int32 latest_supported_version:int32 capacity:int32
    subscription v2 => v1 + flags:int8   (bit 0: draining; other bits ignored)
    assignment      => version:int32 latest_supported_version:int32 error:int32
                       (error 0: none, 1: VERSION_PROBING)

Version probing: when a subscription's version is higher than the leader's own, the leader
cannot read it. It then moves nothing: every member gets exactly its valid owned partitions,
error VERSION_PROBING and the leader's version; members downgrade to it and rejoin.
Otherwise the leader assigns, writes the lowest version in the group (every member can read
it) and its own latest supported version, so downgraded members see when they may upgrade.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from coordinator.assignors.base import (
    PartitionAssignor,
    RebalanceProtocol,
    known_topic_sets,
    member_order_key,
)
from coordinator.assignors.cooperative import without_transfers
from coordinator.assignors.ownership import NO_OWNER, Claim, Ownership, resolve_ownership
from coordinator.assignors.partition_space import PartitionSpace
from coordinator.assignors.weighted import weighted_sticky_assign
from coordinator.protocol import Assignment, ProtocolError, Subscription, TopicPartition

MIN_VERSION: Final = 1
LATEST_VERSION: Final = 2
ERROR_NONE: Final = 0
VERSION_PROBING: Final = 1
_FLAG_DRAINING: Final = 0x01
_INT32_MAX: Final = 2**31 - 1

_HEADER = struct.Struct(">ii")
_SUBSCRIPTION_V1 = struct.Struct(">iii")
_SUBSCRIPTION_V2 = struct.Struct(">iiib")
_ASSIGNMENT = struct.Struct(">iii")


@dataclass(frozen=True, slots=True)
class StaticStickySubscriptionInfo:
    version: int
    latest_supported_version: int
    capacity: int = 1
    draining: bool = False


@dataclass(frozen=True, slots=True)
class StaticStickyAssignmentInfo:
    version: int
    latest_supported_version: int
    error: int = ERROR_NONE


def encode_subscription_info(info: StaticStickySubscriptionInfo) -> bytes:
    if info.version == 1:
        if info.draining:
            raise ValueError("subscription user data v1 cannot say draining (use capacity 0)")
        return _SUBSCRIPTION_V1.pack(info.version, info.latest_supported_version, info.capacity)
    if info.version == 2:
        flags = _FLAG_DRAINING if info.draining else 0
        return _SUBSCRIPTION_V2.pack(
            info.version, info.latest_supported_version, info.capacity, flags
        )
    raise ValueError(f"cannot encode static-sticky subscription user data v{info.version}")


def decode_subscription_info(data: bytes | None) -> StaticStickySubscriptionInfo:
    """Parse subscription user data. A version newer than ours yields only the header
    (version and latest supported version): its fields are unknown to us, and the leader
    answers it with version probing anyway."""
    version, latest = _header(data, "subscription")
    assert data is not None
    if version > LATEST_VERSION:
        return StaticStickySubscriptionInfo(version, latest)
    layout = _SUBSCRIPTION_V1 if version == 1 else _SUBSCRIPTION_V2
    if len(data) < layout.size:
        raise ProtocolError(
            f"static-sticky subscription user data v{version} needs {layout.size} bytes, "
            f"got {len(data)}"
        )
    fields = layout.unpack_from(data)
    capacity = fields[2]
    if capacity < 0:
        raise ProtocolError(f"static-sticky subscription capacity is negative ({capacity})")
    draining = version >= 2 and bool(fields[3] & _FLAG_DRAINING)
    return StaticStickySubscriptionInfo(version, latest, capacity, draining)


def encode_assignment_info(info: StaticStickyAssignmentInfo) -> bytes:
    return _ASSIGNMENT.pack(info.version, info.latest_supported_version, info.error)


def decode_assignment_info(data: bytes | None) -> StaticStickyAssignmentInfo:
    _header(data, "assignment")
    assert data is not None
    if len(data) < _ASSIGNMENT.size:
        raise ProtocolError(
            f"static-sticky assignment user data needs {_ASSIGNMENT.size} bytes, got {len(data)}"
        )
    return StaticStickyAssignmentInfo(*_ASSIGNMENT.unpack_from(data))


def _header(data: bytes | None, what: str) -> tuple[int, int]:
    if data is None or len(data) < _HEADER.size:
        size = "no" if data is None else str(len(data))
        raise ProtocolError(
            f"static-sticky {what} user data needs an 8-byte version header, got {size} bytes"
        )
    version, latest = _HEADER.unpack_from(data)
    if version < MIN_VERSION or latest < version:
        raise ProtocolError(
            f"static-sticky {what} user data has version {version}, latest supported "
            f"{latest}: versions start at {MIN_VERSION} and latest >= version"
        )
    return version, latest


class StaticStickyAssignor(PartitionAssignor):
    """See the module docstring. `version` is the newest user-data version this member
    speaks (lower it to act as an older release), `capacity` its weight, `draining` asks
    for no partitions."""

    name = "static-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def __init__(self, version: int = LATEST_VERSION, capacity: int = 1, draining: bool = False):
        if not MIN_VERSION <= version <= LATEST_VERSION:
            raise ValueError(f"static-sticky version must be {MIN_VERSION}..{LATEST_VERSION}")
        if not 0 <= capacity <= _INT32_MAX:
            raise ValueError("static-sticky capacity must be between 0 and 2**31 - 1")
        self.version = version
        self.capacity = capacity
        self.draining = draining
        self._leader_supported_version: int | None = None
        self._last_error = ERROR_NONE
        self._last_sent_version: int | None = None

    # -- member side ----------------------------------------------------------------------

    @property
    def used_version(self) -> int:
        """The version this member encodes: its own, capped by the newest the leader said
        it supports."""
        if self._leader_supported_version is None:
            return self.version
        return min(self.version, self._leader_supported_version)

    @property
    def leader_supported_version(self) -> int | None:
        return self._leader_supported_version

    @property
    def probing_requested(self) -> bool:
        """The last assignment was a version probe: rejoin now (with `used_version`)."""
        return self._last_error == VERSION_PROBING

    @property
    def should_upgrade(self) -> bool:
        """The leader now supports a newer version than this member last sent, and so do
        we: rejoin at the next opportunity to complete the upgrade."""
        return (
            not self.probing_requested
            and self._last_sent_version is not None
            and self.used_version > self._last_sent_version
        )

    def subscription_user_data(self, topics: Collection[str]) -> bytes | None:
        version = self.used_version
        self._last_sent_version = version
        # v1 has no flags: a draining member talking to a v1 leader asks for nothing by
        # announcing capacity 0 instead.
        draining_in_flags = self.draining and version >= 2
        capacity = 0 if self.draining and not draining_in_flags else self.capacity
        return encode_subscription_info(
            StaticStickySubscriptionInfo(version, self.version, capacity, draining_in_flags)
        )

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        try:
            info = decode_assignment_info(assignment.user_data)
        except ProtocolError:
            # Not from a static-sticky leader we understand: nothing to learn from it.
            self._last_error = ERROR_NONE
            return
        self._leader_supported_version = info.latest_supported_version
        self._last_error = info.error

    # -- leader side ------------------------------------------------------------------------

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        last_assignment_by_member: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> dict[str, Assignment]:
        members = sorted(
            subscriptions,
            key=lambda m: member_order_key(m, subscriptions[m].group_instance_id),
        )
        infos = [_read_info(subscriptions[m].user_data) for m in members]
        topic_sets = known_topic_sets(partitions_per_topic, subscriptions, members)
        space = PartitionSpace(partitions_per_topic, set().union(*topic_sets))
        ownership = resolve_ownership(
            space,
            [
                Claim(subscriptions[m].owned_partitions, subscriptions[m].generation_id)
                for m in members
            ],
        )

        if any(info is not None and info.version > self.version for info in infos):
            probe = encode_assignment_info(
                StaticStickyAssignmentInfo(self.version, self.version, VERSION_PROBING)
            )
            return {
                member_id: Assignment(space.to_partitions(sorted(ownership.owned[m])), probe)
                for m, member_id in enumerate(members)
            }

        preferred = _preferred_partitions(
            space, members, subscriptions, ownership, last_assignment_by_member or {}
        )
        topic_indices = [space.topic_indices(topics) for topics in topic_sets]
        weights = [_weight(info) for info in infos]
        final = weighted_sticky_assign(space, topic_indices, weights, preferred)

        group_version = min((i.version for i in infos if i is not None), default=self.version)
        user_data = encode_assignment_info(
            StaticStickyAssignmentInfo(group_version, self.version, ERROR_NONE)
        )
        owner_of = ownership.owner_of
        return {
            member_id: Assignment(
                space.to_partitions(without_transfers(m, final[m], owner_of)), user_data
            )
            for m, member_id in enumerate(members)
        }


def _read_info(user_data: bytes | None) -> StaticStickySubscriptionInfo | None:
    """A member's user data, or None when it has none we can read. One member's bad bytes
    must not fail the whole group's assignment: such a member counts as a plain member of
    capacity 1 that says nothing about versions."""
    if not user_data:
        return None
    try:
        return decode_subscription_info(user_data)
    except ProtocolError:
        return None


def _weight(info: StaticStickySubscriptionInfo | None) -> int:
    if info is None:
        return 1
    return 0 if info.draining else info.capacity


def _preferred_partitions(
    space: PartitionSpace,
    members: Sequence[str],
    subscriptions: Mapping[str, Subscription],
    ownership: Ownership,
    last_assignment_by_member: Mapping[str, Sequence[TopicPartition]],
) -> list[list[int]]:
    """Per member: its valid owned partitions, or, if it owns none, its last assignment
    minus partitions someone validly owns or another member's last assignment also lists."""
    preferred = [list(owned) for owned in ownership.owned]
    owner_of = ownership.owner_of
    remembered: dict[int, list[int]] = {}
    listed_by: dict[int, int] = {}
    for m, member_id in enumerate(members):
        if preferred[m]:
            continue
        last = last_assignment_by_member.get(member_id)
        instance_id = subscriptions[member_id].group_instance_id
        if last is None and instance_id is not None:
            last = last_assignment_by_member.get(instance_id)
        if not last:
            continue
        ids = [n for n in dict.fromkeys(space.ids_of(last)) if owner_of[n] == NO_OWNER]
        remembered[m] = ids
        for n in ids:
            listed_by[n] = listed_by.get(n, 0) + 1
    for m, ids in remembered.items():
        preferred[m] = [n for n in ids if listed_by[n] == 1]
    return preferred
