"""Hot standby in a managed group on the embedded coordinator: the standby pods, and the
promotion step of a reconcile pass (the rules are `promotion.decide_promotions`).

A standby pod (`<group>-standby-<n>`, label `staticfleet.dev/role: standby`) runs the member
image with `STATICFLEET_STANDBY_ID` (its pod name) and no instance id: it heartbeats as a
standby and holds nothing. It has no slot annotation, so every slot rule (scale-down,
rollout, missing slots) ignores it.

A promotion, one pass:
1. decide (pure) from the slots' pod health, the coordinator's ready standbys and the
   promotions already in status;
2. write them into `status.promotions` (write-ahead: a restarted operator resumes them);
3. `GroupCoordinator.promote` (idempotent; the old holder is fenced, no rebalance);
4. relabel the standby pod into the slot (slot label and annotations, role `member`): it
   now is the slot's pod for every other rule, so no replacement pod is created for the
   slot, and the standby count is short by one: the next pass creates a new standby (the
   replacement pod becomes the standby);
5. record `status.lastPromotion`, an Event and the metrics.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from coordinator import ErrorCode
from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.crd import ConsumerGroupSpec, Mode, PromotionStatus
from staticfleet_operator.kube import NotFound
from staticfleet_operator.members import (
    INSTANCE_ID_ANNOTATION,
    POD_KEY_ANNOTATION,
    PROTOCOL_ANNOTATION,
    SLOT_ANNOTATION,
    SLOT_LABEL,
    TEMPLATE_HASH_ANNOTATION,
    MemberSettings,
    member_env,
    member_manifest,
    pod_slot,
    template_hash,
)
from staticfleet_operator.promotion import ActiveSlot, PodHealth, Standby
from staticfleet_operator.promotion import decide_promotions as decide
from staticfleet_operator.status import read_status

if TYPE_CHECKING:
    from staticfleet_operator.reconcile import Operator

log = logging.getLogger("staticfleet.operator.standby")

ROLE_LABEL: Final = "staticfleet.dev/role"
STANDBY_ROLE: Final = "standby"
MEMBER_ROLE: Final = "member"  # a promoted standby: the slot's pod now
STANDBY_ID_ANNOTATION: Final = "staticfleet.dev/standby-id"
# A promotion the coordinator keeps refusing with REBALANCE_IN_PROGRESS is given up after
# this long: the slot then gets a plain static replacement pod, as without standbys.
PROMOTION_RETRY_SECONDS: Final = 30.0


def standbys_enabled(spec: ConsumerGroupSpec) -> bool:
    return spec.mode is Mode.MANAGED and not spec.coordinator.is_kafka


@dataclass(frozen=True, slots=True)
class StandbyPod:
    name: str
    template_hash: str
    protocol: str
    deleting: bool


def standby_pods(pods: Sequence[Mapping[str, Any]]) -> list[StandbyPod]:
    """Pods waiting as standbys (labelled so, and not relabeled into a slot yet)."""
    found = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        if labels.get(ROLE_LABEL) != STANDBY_ROLE or pod_slot(pod) is not None:
            continue
        annotations = metadata.get("annotations") or {}
        found.append(
            StandbyPod(
                name=str(metadata.get("name", "")),
                template_hash=annotations.get(TEMPLATE_HASH_ANNOTATION, ""),
                protocol=annotations.get(PROTOCOL_ANNOTATION, ""),
                deleting=bool(metadata.get("deletionTimestamp")),
            )
        )
    return sorted(found, key=lambda p: p.name)


def standby_pod_name(group_name: str, taken: set[str]) -> str:
    """The lowest free `<group>-standby-<n>` (a promoted standby keeps its name)."""
    n = 0
    while f"{group_name}-standby-{n}" in taken:
        n += 1
    return f"{group_name}-standby-{n}"


def standby_pod(
    spec: ConsumerGroupSpec,
    settings: MemberSettings,
    *,
    namespace: str,
    owner_uid: str,
    name: str,
    protocol: RebalanceProtocolSetting,
) -> dict[str, Any]:
    """A standby's manifest: the member template, no slot, STATICFLEET_STANDBY_ID set."""
    if spec.template is None:
        raise ValueError("a standby pod needs spec.template")
    entries = [
        entry
        for entry in member_env(spec, settings, "", protocol)
        if entry["name"] != env.INSTANCE_ID
    ]
    entries.append({"name": env.STANDBY_ID, "value": name})
    return member_manifest(
        spec,
        settings,
        name=name,
        namespace=namespace,
        owner_uid=owner_uid,
        labels={ROLE_LABEL: STANDBY_ROLE},
        annotations={
            STANDBY_ID_ANNOTATION: name,
            PROTOCOL_ANNOTATION: protocol.value,
            TEMPLATE_HASH_ANNOTATION: template_hash(spec),
            POD_KEY_ANNOTATION: uuid.uuid4().hex,
        },
        entries=entries,
    )


def promoted_patch(slot: int, instance_id: str) -> dict[str, Any]:
    """What makes a promoted standby pod the slot's pod for every other rule."""
    return {
        "metadata": {
            "labels": {SLOT_LABEL: str(slot), ROLE_LABEL: MEMBER_ROLE},
            "annotations": {SLOT_ANNOTATION: str(slot), INSTANCE_ID_ANNOTATION: instance_id},
        }
    }


def pod_health(pod: Mapping[str, Any] | None) -> PodHealth:
    if pod is None:
        return PodHealth.DELETED
    status = pod.get("status") or {}
    # Before the deletion check: a pod on a lost node never finishes terminating.
    if status.get("reason") == "NodeLost" or status.get("phase") == "Unknown":
        return PodHealth.NODE_LOST
    if status.get("phase") in ("Failed", "Succeeded"):
        return PodHealth.FAILED
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return PodHealth.TERMINATING
    return PodHealth.RUNNING


def active_slots(
    spec: ConsumerGroupSpec,
    pods: Sequence[Mapping[str, Any]],
    replicas: int,
    listed_instance_ids: set[str],
) -> list[ActiveSlot]:
    """Each slot below `replicas` with the health of its live pod (a running one wins over
    a terminating one: that is a replacement already made)."""
    by_slot: dict[int, list[Mapping[str, Any]]] = {}
    for pod in pods:
        slot = pod_slot(pod)
        if slot is not None:
            by_slot.setdefault(slot, []).append(pod)
    slots = []
    for slot in range(replicas):
        healths = [pod_health(pod) for pod in by_slot.get(slot, [])] or [PodHealth.DELETED]
        # A live pod wins: a running one (a replacement already made), then one still
        # shutting down.
        health = next(
            (h for h in (PodHealth.RUNNING, PodHealth.TERMINATING) if h in healths), healths[0]
        )
        instance_id = spec.instance_id(slot)
        slots.append(ActiveSlot(slot, instance_id, health, instance_id in listed_instance_ids))
    return slots


async def promote_standbys(
    op: Operator,
    body: Mapping[str, Any],
    spec: ConsumerGroupSpec,
    pods: Sequence[Mapping[str, Any]],
    listed_instance_ids: set[str],
    *,
    rollout_active: bool,
) -> str | None:
    """The promotion step of a pass; what it did, or None when there was nothing to do."""
    if not standbys_enabled(spec):
        return None
    previous = read_status(body)
    recorded = previous.promotions
    if rollout_active and not recorded:
        return None  # a rollout deletes pods on purpose: its own replacements take over
    ready = set(op.coordinator.standbys(spec.group_id).standby_ids)
    standbys = [Standby(p.name, p.name in ready and not p.deleting) for p in standby_pods(pods)]
    slots = active_slots(spec, pods, spec.replicas or 0, listed_instance_ids)
    decisions = decide(slots, standbys, recorded)
    if not decisions:
        return None
    now = op.clock()
    status = previous.model_copy(deep=True)
    # Recorded ones keep when they started; new ones start now.
    status.promotions = [
        d if d.started_at is not None else d.model_copy(update={"started_at": now})
        for d in decisions
    ]
    await op.write_status(body, status.to_patch())  # write-ahead, before anything is promoted
    done: list[str] = []
    for record in list(status.promotions):
        outcome = await _promote_one(op, body, spec, record, now)
        if outcome is None:
            continue  # still in flight: tried again next pass
        status.promotions.remove(record)
        if outcome:
            status.last_promotion = record.model_copy(update={"completed_at": op.clock()})
            done.append(f"{record.standby} -> {record.instance_id}")
    await op.write_status(body, status.to_patch())
    return "promoted: " + ", ".join(done) if done else "promotions in flight"


async def _promote_one(
    op: Operator,
    body: Mapping[str, Any],
    spec: ConsumerGroupSpec,
    record: PromotionStatus,
    now: datetime,
) -> bool | None:
    """True: promoted and relabeled; False: given up; None: try again next pass."""
    metadata = body.get("metadata") or {}
    namespace, name = str(metadata["namespace"]), str(metadata["name"])
    answer = await op.coordinator.promote(spec.group_id, record.standby, record.instance_id)
    relabeled = False
    if answer.error_code is ErrorCode.NONE:
        try:
            await op.patch_pod(
                namespace, name, record.standby, promoted_patch(record.slot, record.instance_id)
            )
            relabeled = True
        except NotFound:
            # The standby's pod is gone since: the slot gets a plain replacement, whose
            # static rejoin fences the member id the standby was given.
            pass
    if relabeled:
        op.metrics.promoted(
            namespace, name, (op.clock() - (record.started_at or now)).total_seconds()
        )
        message = (
            f"standby {record.standby} took over {record.instance_id} (slot {record.slot}, "
            f"{record.rule}): same assignment, no rebalance; the old holder is fenced"
        )
        log.info("%s/%s: %s", namespace, name, message)
        await op.kube.post_event(body, "StandbyPromoted", message)
        return True
    waited = (now - (record.started_at or now)).total_seconds()
    if answer.error_code is ErrorCode.REBALANCE_IN_PROGRESS and waited < PROMOTION_RETRY_SECONDS:
        return None
    detail = "(its pod is gone)" if answer.error_code is ErrorCode.NONE else answer.detail
    op.metrics.promotion_failed(namespace, name)
    message = (
        f"standby {record.standby} not promoted to {record.instance_id}: "
        f"{answer.error_code.name} {detail}; the slot gets a plain static replacement"
    )
    log.warning("%s/%s: %s", namespace, name, message)
    await op.kube.post_event(body, "PromotionFailed", message, warning=True)
    return False


async def keep_standbys(
    op: Operator,
    body: Mapping[str, Any],
    spec: ConsumerGroupSpec,
    pods: Sequence[Mapping[str, Any]],
    protocol: RebalanceProtocolSetting,
) -> list[str]:
    """Create missing standby pods, delete surplus and outdated ones (they hold nothing, so
    this costs no rebalance); the pod names acted on."""
    wanted = spec.standbys if standbys_enabled(spec) else 0
    metadata = body.get("metadata") or {}
    namespace, name = str(metadata["namespace"]), str(metadata["name"])
    current = template_hash(spec)
    live = [p for p in standby_pods(pods) if not p.deleting]
    acted: list[str] = []
    # A standby becomes a member as it was configured: one made for another template or
    # protocol is replaced now, while that costs nothing.
    outdated = [p for p in live if p.template_hash != current or p.protocol != protocol.value]
    surplus = live[wanted:] if len(live) > wanted else []
    for pod in {p.name: p for p in outdated + surplus}.values():
        await op.delete_pod(namespace, name, pod.name)
        acted.append(pod.name)
    keeping = len([p for p in live if p.name not in acted])
    taken = {str((p.get("metadata") or {}).get("name", "")) for p in pods}
    for _ in range(max(wanted - keeping, 0)):
        pod_name = standby_pod_name(name, taken)
        taken.add(pod_name)
        await op.create_pod(
            namespace,
            name,
            standby_pod(
                spec,
                op.settings(name),
                namespace=namespace,
                owner_uid=str(metadata.get("uid", "")),
                name=pod_name,
                protocol=protocol,
            ),
        )
        acted.append(pod_name)
    return acted


def standbys_ready(op: Operator, spec: ConsumerGroupSpec) -> int | None:
    if not standbys_enabled(spec):
        return None
    return len(op.coordinator.standbys(spec.group_id).standby_ids)
