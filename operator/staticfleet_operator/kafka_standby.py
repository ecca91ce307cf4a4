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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from coordinator.client.config import RebalanceProtocolSetting
from coordinator.client.consumer_protocol_state import STATIC_LEAVE_EPOCH
from coordinator.client.kafka_groups import ConsumerGroupDescription
from coordinator.messages import DescribedGroup
from staticfleet_operator.actions import CreatePod, DeletePod, LeaveForStandbys
from staticfleet_operator.crd import (
    ClientFamily,
    ConsumerGroupSpec,
    ConsumerGroupStatus,
    Mode,
    PromotionStatus,
)
from staticfleet_operator.hot_standby import (
    ROLE_LABEL,
    STANDBY_ROLE,
    STANDBY_SLOT_ANNOTATION,
    pod_health,
)
from staticfleet_operator.kafka_clients import client_env_from
from staticfleet_operator.members import (
    INSTANCE_ID_ANNOTATION,
    POD_KEY_ANNOTATION,
    PROTOCOL_ANNOTATION,
    TEMPLATE_HASH_ANNOTATION,
    MemberSettings,
    is_ready,
    member_env,
    member_manifest,
    member_mount,
    pod_name,
    pod_slot,
    template_hash,
)
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
    # At epoch -2: left statically (by itself, or by our leave on its behalf); the broker
    # keeps it listed with its partitions until the standby's join replaces it.
    left: bool = False


@dataclass(frozen=True, slots=True)
class KafkaSlot:
    slot: int
    instance_id: str
    pods: tuple[IdPod, ...]
    holder: IdHolder | None  # None: no member holds the id (nothing to take over)
    # The names the operator gives this slot's pods (its pod, its standby), which their
    # members send as client id: a holder naming one that is not alive is a dead pod's.
    names: frozenset[str] = frozenset()


class Holder(StrEnum):
    NONE = "none"  # the group lists no member under the instance id
    LIVE = "live"  # one of the slot's live pods
    GONE = "gone"  # a pod no longer listed (deleted)
    UNKNOWN = "unknown"  # the key matches several pods, or is empty: never act on a guess


def holder_pod(
    holder: IdHolder | None, pods: Sequence[IdPod], names: frozenset[str] = frozenset()
) -> tuple[Holder, IdPod | None]:
    """Which of the slot's pods the holder is: its client id is a pod's name, else its
    client host a pod's IP (exactly one). Gone only on positive evidence: its client id is
    one of `names` (a pod of this slot) and no live pod has that name. A host matching no pod
    proves nothing (a node's address under SNAT or host networking, a pod without an IP
    yet), so it is UNKNOWN: a live member must never be left on its behalf."""
    if holder is None:
        return Holder.NONE, None
    by_name = [p for p in pods if p.name == holder.client_id]
    if len(by_name) == 1:
        return Holder.LIVE, by_name[0]
    if not by_name and holder.client_id in names:
        return Holder.GONE, None
    host = holder.client_host.lstrip("/")
    by_ip = [p for p in pods if host and p.ip == host]
    if len(by_ip) == 1:
        return Holder.LIVE, by_ip[0]
    return Holder.UNKNOWN, None


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
    - left_once: a holder already at epoch -2 (left) is not left again: the waiting
      standby's next join (within its retry) takes the id.
    """
    leaves: list[StaticLeave] = []
    holders: list[SlotHolder] = []
    for slot in sorted(slots, key=lambda s: s.slot):
        kind, pod = holder_pod(slot.holder, slot.pods, slot.names)
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
        if standby is None or slot.holder.left:  # left already: the standby's join is next
            continue
        rule = "node_lost_too" if health is PodHealth.NODE_LOST else f"pod_{health}"
        leaves.append(
            StaticLeave(slot.slot, slot.instance_id, slot.holder.member_id, standby.name, rule)
        )
    return leaves, holders


def kafka_standbys_enabled(spec: ConsumerGroupSpec, protocol: RebalanceProtocolSetting) -> bool:
    """A managed Kafka group of our members on the consumer protocol, with standbys: only
    our member waits on a held instance id (`--standby-wait-ms`); Java and librdkafka exit."""
    coordinator = spec.coordinator
    return (
        spec.mode is Mode.MANAGED
        and coordinator.is_kafka
        and coordinator.client_family is ClientFamily.STATICFLEET
        and protocol is RebalanceProtocolSetting.CONSUMER
        and spec.standbys > 0
    )


def standby_slot(pod: Mapping[str, Any]) -> int | None:
    """The slot a Kafka standby pod waits on; None for any other pod."""
    metadata = pod.get("metadata") or {}
    if (metadata.get("labels") or {}).get(ROLE_LABEL) != STANDBY_ROLE:
        return None
    raw = (metadata.get("annotations") or {}).get(STANDBY_SLOT_ANNOTATION)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def standby_pod_name(group_name: str, slot: int) -> str:
    """A slot's standby pod: named by its slot, as the slot's pod is (`members.pod_name`),
    so the API server refuses a second one and its client id names it."""
    return f"{group_name}-standby-{slot}"


def kafka_standby_pod(
    spec: ConsumerGroupSpec,
    settings: MemberSettings,
    *,
    slot: int,
    namespace: str,
    owner_uid: str,
    pod_key: str,
) -> dict[str, Any]:
    """A slot's standby: the member template with the slot's instance id, the wait
    (kafka_clients.STANDBY_WAIT_MS) and its pod name as client id; no slot annotation."""
    protocol = RebalanceProtocolSetting.CONSUMER
    instance_id = spec.instance_id(slot)
    return member_manifest(
        spec,
        settings,
        name=standby_pod_name(settings.group_name, slot),
        namespace=namespace,
        owner_uid=owner_uid,
        labels={ROLE_LABEL: STANDBY_ROLE},
        annotations={
            STANDBY_SLOT_ANNOTATION: str(slot),
            INSTANCE_ID_ANNOTATION: instance_id,
            PROTOCOL_ANNOTATION: protocol.value,
            TEMPLATE_HASH_ANNOTATION: template_hash(spec),
            POD_KEY_ANNOTATION: pod_key,
        },
        entries=member_env(spec, settings, instance_id, protocol),
        env_from=client_env_from(spec),
        mount=member_mount(spec, settings),
    )


def keep_kafka_standbys(
    spec: ConsumerGroupSpec,
    settings: MemberSettings,
    pods: Sequence[Mapping[str, Any]],
    replicas: int,
    *,
    enabled: bool,
    rollout_active: bool,
    namespace: str,
    owner_uid: str,
    pass_id: str,
) -> list[CreatePod | DeletePod]:
    """One standby for each of the first `spec.standbys` slots below `replicas`: create the
    missing, delete those of other slots and, outside a rollout, those made for another
    template (a graceful stop: one holding the id hands it and its partitions to the slot's
    waiting pod, epoch -2)."""
    current = template_hash(spec)
    actions: list[CreatePod | DeletePod] = []
    covered: set[int] = set()
    names = {str((p.get("metadata") or {}).get("name", "")) for p in pods}
    for pod in pods:
        slot = standby_slot(pod)
        metadata = pod.get("metadata") or {}
        if slot is None or metadata.get("deletionTimestamp"):
            continue
        annotations = metadata.get("annotations") or {}
        outdated = annotations.get(TEMPLATE_HASH_ANNOTATION) != current
        wanted = slot < min(spec.standbys, replicas)
        if not enabled or not wanted or (outdated and not rollout_active):
            actions.append(DeletePod(str(metadata.get("name", ""))))
        else:
            covered.add(slot)
    if not enabled:
        return actions
    for slot in range(min(spec.standbys, replicas)):
        name = standby_pod_name(settings.group_name, slot)
        if slot in covered or name in names:  # a deleted one still terminating: next pass
            continue
        manifest = kafka_standby_pod(
            spec,
            settings,
            slot=slot,
            namespace=namespace,
            owner_uid=owner_uid,
            pod_key=f"{pass_id}-{name}",
        )
        actions.append(CreatePod(manifest))
    return actions


def kafka_slots(
    spec: ConsumerGroupSpec,
    group_name: str,
    pods: Sequence[Mapping[str, Any]],
    described: DescribedGroup | None,
    replicas: int,
    consumer: ConsumerGroupDescription | None = None,
) -> list[KafkaSlot]:
    """Each slot below `replicas`: its live pods (the slot's and its standby) and the member
    ConsumerGroupDescribe lists under its instance id (`consumer`: its member epochs)."""
    epochs = {m.member_id: m.member_epoch for m in (consumer.members if consumer else ())}
    holders = {
        m.group_instance_id: IdHolder(
            m.member_id,
            m.client_id,
            m.client_host,
            left=epochs.get(m.member_id) == STATIC_LEAVE_EPOCH,
        )
        for m in (described.members if described is not None else [])
        if m.group_instance_id
    }
    by_slot: dict[int, list[IdPod]] = {}
    for pod in pods:
        slot = pod_slot(pod)
        slot = slot if slot is not None else standby_slot(pod)
        if slot is None:
            continue
        metadata = pod.get("metadata") or {}
        ip = str((pod.get("status") or {}).get("podIP") or "")
        view = IdPod(str(metadata.get("name", "")), ip, pod_health(pod), is_ready(pod))
        by_slot.setdefault(slot, []).append(view)
    slots = []
    for slot in range(replicas):
        instance_id = spec.instance_id(slot)
        pods_of = tuple(sorted(by_slot.get(slot, []), key=lambda p: p.name))
        names = frozenset({pod_name(group_name, slot), standby_pod_name(group_name, slot)})
        slots.append(KafkaSlot(slot, instance_id, pods_of, holders.get(instance_id), names))
    return slots


def plan_kafka_takeovers(
    slots: Sequence[KafkaSlot],
    previous: ConsumerGroupStatus,
    *,
    rollout_active: bool,
    now: datetime,
) -> tuple[ConsumerGroupStatus, LeaveForStandbys] | None:
    """The status recording this pass's takeovers (write-ahead, in status.promotions as the
    embedded promotion's) and the action making them; None when there is nothing to do.

    A recorded takeover is decided again from the broker, not replayed: if its slot still
    needs one, the leave is sent again (the same member id; a repeat is answered harmlessly);
    if not (the standby holds the id: the leave was made before a restart), the record is
    only completed. So the leave never names a member id other than a dead pod's."""
    leaves, _ = decide_takeovers(slots)
    if rollout_active:
        leaves = []  # a rollout stops pods on purpose; their graceful stop hands the id over
    recorded = {p.slot: p for p in previous.promotions}
    if not leaves and not recorded:
        return None
    records: list[PromotionStatus] = []
    member_ids: list[str | None] = []
    for leave in leaves:
        earlier = recorded.pop(leave.slot, None)
        started = earlier.started_at if earlier is not None else now
        records.append(
            PromotionStatus(
                standby=leave.standby,
                slot=leave.slot,
                instance_id=leave.instance_id,
                rule=leave.rule,
                started_at=started,
            )
        )
        member_ids.append(leave.member_id)
    for earlier in recorded.values():  # made before: only completed now
        records.append(earlier)
        member_ids.append(None)
    status = previous.model_copy(deep=True)
    status.promotions = records
    return status, LeaveForStandbys(tuple(records), tuple(member_ids))
