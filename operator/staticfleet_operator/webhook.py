"""The mutating admission of adopted member pods: a slot, its instance id and the member env.

`pod_mutation` is pure (what to change on a pod, given its slot); `admit_pod` is the glue
the Kopf handler calls: look the ConsumerGroup up, get a slot and protocol from the adopted
mode's slot table (adopted.py, which the reconcile pass keeps too), and return the
changes. A pod that already carries a slot (a re-admission) keeps it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator import adopted
from staticfleet_operator.context import Operator
from staticfleet_operator.crd import ConsumerGroupSpec, Mode, parse_spec, validate_spec
from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.kafka_clients import client_env_from
from staticfleet_operator.kube import KubeError
from staticfleet_operator.members import (
    POD_KEY_ANNOTATION,
    SLOT_LABEL,
    MemberSettings,
    identity_annotations,
    member_env,
    member_mount,
    template_hash,
    with_member_env,
)
from staticfleet_operator.owned import GROUP_LABEL
from staticfleet_operator.reconcile import sync_member_token
from staticfleet_operator.rollout import CoordinatorView
from staticfleet_operator.status import read_status

log = logging.getLogger("staticfleet.operator.webhook")

WEBHOOK_PATH: Final = "/staticfleet-mutate-pod"


@dataclass(frozen=True, slots=True)
class PodMutation:
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]


def pod_mutation(
    pod: Mapping[str, Any],
    spec: ConsumerGroupSpec,
    settings: MemberSettings,
    *,
    slot: int,
    protocol: RebalanceProtocolSetting,
    pod_key: str,
) -> PodMutation:
    """The labels, annotations and spec an adopted pod is admitted with."""
    instance_id = spec.instance_id(slot)
    metadata = pod.get("metadata") or {}
    return PodMutation(
        labels={**(metadata.get("labels") or {}), SLOT_LABEL: str(slot)},
        annotations={
            **(metadata.get("annotations") or {}),
            **identity_annotations(
                slot, instance_id, protocol, template_hash(spec, settings.token_audience), pod_key
            ),
        },
        spec=with_member_env(
            pod.get("spec") or {},
            member_env(spec, settings, instance_id, protocol),
            client_env_from(spec),
            member_mount(spec, settings),
            settings.member_health_port,
        ),
    )


async def admit_pod(op: Operator, namespace: str, pod: Mapping[str, Any]) -> PodMutation | None:
    """The mutation for a pod labelled with a ConsumerGroup's name; None to leave it be (no
    such group, an invalid spec, or a managed group: its pods are stamped at creation).
    Raises when the pod cannot be admitted now (Kopf then rejects the admission)."""
    try:
        mutation = await _admit_pod(op, namespace, pod)
    except Exception:
        op.metrics.admission("rejected")
        raise
    op.metrics.admission("skipped" if mutation is None else "stamped")
    return mutation


async def _admit_pod(op: Operator, namespace: str, pod: Mapping[str, Any]) -> PodMutation | None:
    metadata = pod.get("metadata") or {}
    name = (metadata.get("labels") or {}).get(GROUP_LABEL)
    if not name:
        return None
    # From the operator's indices (observed.py): no API call on the admission path.
    ref = GroupRef(namespace, name)
    body = await op.observed.group(op.kube, namespace, name)
    if body is None or validate_spec(body.get("spec") or {}):
        log.warning("pod in %s names ConsumerGroup %s, which is absent or invalid", namespace, name)
        return None
    spec = parse_spec(body.get("spec") or {})
    if spec.mode is not Mode.ADOPTED:
        return None
    if spec.selector is not None and not spec.selector.matches(metadata.get("labels") or {}):
        return None
    try:
        # The pod's env references the token Secret: make sure it exists and is registered
        # (a Kafka cluster authenticates members itself: no token).
        if not spec.coordinator.is_kafka:
            await sync_member_token(op, ref, body)
    except (KubeError, aiohttp.ClientError) as error:
        # Not a reason to refuse the pod: the next reconcile pass creates the Secret (the
        # kubelet waits for it).
        log.warning("could not ensure the member token of %s/%s: %s", namespace, name, error)
    annotations = metadata.get("annotations") or {}
    pod_key = annotations.get(POD_KEY_ANNOTATION) or uuid.uuid4().hex
    siblings = await op.observed.member_pods(op.kube, namespace, name)
    backend = await op.backend(ref, spec)
    view = CoordinatorView.from_described(await backend.describe(spec.group_id))
    rollout = read_status(body).rollout
    admission, fresh = await adopted.admit(
        op.memories.of(ref), spec, siblings, view, pod_key, rollout, op.clock()
    )
    if fresh:
        op.metrics.slot_allocated(namespace, name)
    return pod_mutation(
        pod,
        spec,
        op.settings(name),
        slot=admission.slot,
        protocol=admission.protocol,
        pod_key=pod_key,
    )
