"""Hot standby on a Kafka-coordinated group on the consumer protocol (KIP-848): which pod
holds each slot's instance id, and which takeovers to make. Pure; the pass feeds it from
ConsumerGroupDescribe and the pods, the actuator sends the static leaves
(`KafkaBackend.static_leave`). docs/kafka.md, "Hot standby".

Unlike the embedded coordinator's standbys (`promotion.py`), a standby here is per slot: a
pod started with the slot's instance id and `STATICFLEET_STANDBY_WAIT_MS`, whose joins the
broker refuses while the slot's member holds the id. The takeover is one ConsumerGroupHeartbeat
with epoch -2 on the dead member's behalf: the broker keeps its partitions and the group
epoch, and the waiting standby's next join is a static restart.

Since either pod of a slot may hold the id (a graceful stop of the slot's pod hands it to the
standby by itself), the holder is read from the broker, never assumed from labels: the
described member's client id names its pod (our member, started by the operator, sends the
pod's name), else its client host is the pod's IP. A takeover is decided only for a holder
identified as a pod that is gone, failed or on a lost node; so a repeated decision (an
operator restarted, the status write-ahead resumed) after the standby took the id finds the
standby holding it and sends nothing: the leave can never hit the standby's member id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from staticfleet_operator.promotion import PodHealth


@dataclass(frozen=True, slots=True)
class IdPod:
    """A live pod started with a slot's instance id: the slot's pod or its standby."""

    name: str
    ip: str
    health: PodHealth
    ready: bool  # /readyz: a waiting standby answers `standby` (ready)


@dataclass(frozen=True, slots=True)
class IdHolder:
    """The member ConsumerGroupDescribe lists under the instance id."""

    member_id: str
    client_id: str
    client_host: str  # as Kafka writes it: "/10.1.2.3"


@dataclass(frozen=True, slots=True)
class KafkaSlot:
    slot: int
    instance_id: str
    pods: tuple[IdPod, ...]
    holder: IdHolder | None  # None: no member holds the id (nothing to take over)


class Holder(StrEnum):
    NONE = "none"  # the group lists no member under the instance id
    LIVE = "live"  # one of the slot's live pods
    GONE = "gone"  # a pod no longer listed (deleted)
    UNKNOWN = "unknown"  # the key matches several pods, or is empty: never act on a guess


def holder_pod(holder: IdHolder | None, pods: Sequence[IdPod]) -> tuple[Holder, IdPod | None]:
    """Which of the slot's pods the holder is: its client id is a pod's name, else its
    client host a pod's IP (exactly one). A non-empty key matching no live pod: the holder's
    pod is gone."""
    if holder is None:
        return Holder.NONE, None
    by_name = [p for p in pods if p.name == holder.client_id]
    if len(by_name) == 1:
        return Holder.LIVE, by_name[0]
    host = holder.client_host.lstrip("/")
    by_ip = [p for p in pods if host and p.ip == host]
    if len(by_ip) == 1:
        return Holder.LIVE, by_ip[0]
    if by_ip or not host:
        return Holder.UNKNOWN, None
    return Holder.GONE, None


@dataclass(frozen=True, slots=True)
class StaticLeave:
    """A takeover: a static leave (epoch -2) for `member_id`, whose pod is not alive, so
    `standby` (waiting on the id) joins in its place with its partitions."""

    slot: int
    instance_id: str
    member_id: str
    standby: str
    rule: str  # pod_deleted, pod_failed or node_lost_too (promotion.py's names)


@dataclass(frozen=True, slots=True)
class SlotHolder:
    """The pod holding a slot's id: the slot's pod from now on (the other one its standby)."""

    slot: int
    pod: str


def decide_takeovers(slots: Sequence[KafkaSlot]) -> tuple[list[StaticLeave], list[SlotHolder]]:
    """The static leaves to send now and the pods that hold their slot's id.

    Rules (tests/operator/test_kafka_standby.py names each):
    - holder_is_the_slots_pod: the live pod holding the id is the slot's pod, whatever its
      labels said (the standby took the id at a graceful stop, or a takeover finished).
    - running_is_never_taken: a holder whose pod runs or is terminating keeps the id (a
      terminating pod still revokes, commits and leaves by itself).
    - unknown_holder_waits: a holder not identified as exactly one pod, or gone with no ready
      standby, is left to the broker's session timeout.
    - ready_standby_only: the takeover needs a live Ready pod of the slot other than the
      holder's (a standby waiting on the id, answering `standby`).
    - node_lost_too / failed: a holder on a lost node or in a failed pod is taken over too;
      its process, if it still runs, is fenced at its next heartbeat.
    """
    leaves: list[StaticLeave] = []
    holders: list[SlotHolder] = []
    for slot in sorted(slots, key=lambda s: s.slot):
        kind, pod = holder_pod(slot.holder, slot.pods)
        if kind is Holder.LIVE and pod is not None:
            holders.append(SlotHolder(slot.slot, pod.name))
            if pod.health in (PodHealth.RUNNING, PodHealth.TERMINATING):
                continue
            health = pod.health
        elif kind is Holder.GONE:
            health = PodHealth.DELETED
        else:
            continue
        assert slot.holder is not None
        holder_name = pod.name if pod is not None else None
        standby = next(
            (
                p
                for p in sorted(slot.pods, key=lambda p: p.name)
                if p.name != holder_name and p.ready and p.health is PodHealth.RUNNING
            ),
            None,
        )
        if standby is None:
            continue
        rule = "node_lost_too" if health is PodHealth.NODE_LOST else f"pod_{health}"
        leaves.append(
            StaticLeave(slot.slot, slot.instance_id, slot.holder.member_id, standby.name, rule)
        )
    return leaves, holders
