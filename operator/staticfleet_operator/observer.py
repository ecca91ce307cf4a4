"""Observe: everything one pass over a ConsumerGroup decides on, read in one place.

`observe` is the pass's only reader: the object (from Kopf's index), its pods and the
Secrets it names (from the informer's stores, with the operator's own writes laid over
them: observed.py), the embedded coordinator's or the Kafka cluster's view of the group,
its topic metadata, pending expected members and ready standbys. It writes nothing (but
the Kafka rebalance journal, a record of what describe showed). What it returns is a
frozen `GroupObservation` (group_observation.py), the input of the pure `plan_pass`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from coordinator.client.kafka_errors import KafkaAccessError
from coordinator.messages import OffsetFetchRequest
from staticfleet_operator.backends import (
    CoordinatorUnreachable,
    GroupBackend,
    KafkaBackend,
    committed_of,
)
from staticfleet_operator.context import NotActing, Operator, read_client_settings
from staticfleet_operator.crd import (
    ConsumerGroupSpec,
    KafkaSourceSpec,
    Mode,
    parse_spec,
    validate_spec,
)
from staticfleet_operator.group_observation import (
    UNREACHABLE,
    DisruptionBudget,
    ExpectedMembers,
    GroupObservation,
    TokenSecret,
    Unreachable,
)
from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.kafka_clients import client_config_secret_name
from staticfleet_operator.lag import LagReading, lag_due
from staticfleet_operator.members import budget_key, members_budget_spec, members_of
from staticfleet_operator.owned import members_disruption_budget_name
from staticfleet_operator.rollout.migration import pending
from staticfleet_operator.status import read_status
from staticfleet_operator.tokens import needs_group_token, token_secret_ref

logger = logging.getLogger(__name__)


async def observe(
    op: Operator, ref: GroupRef
) -> tuple[GroupObservation, GroupBackend | None] | None:
    """The group as it is now, and its backend (for the actuator's LeaveGroup); None when
    the group is gone or being deleted (the finalizer's business)."""
    body = await op.observed.group(op.kube, ref.namespace, ref.name)
    if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
        return None
    base = _base(op, ref, body)
    problems = validate_spec(body.get("spec") or {})
    if problems:
        return replace(base, problems=tuple(problems)), None
    spec = parse_spec(body.get("spec") or {})
    pods = tuple(await op.observed.member_pods(op.kube, ref.namespace, ref.name))
    found: dict[str, Any] = {"spec": spec, "pods": pods}
    memory = op.memories.get(ref)
    if spec.mode is Mode.MANAGED:
        # Read only while the budget is not known to be as the spec wants (the first pass
        # after a start or a change of spec.disruption): the informer does not watch
        # budgets, and a settled group's pass makes no request (docs/operator.md, "Scale
        # and disruptions").
        known = budget_key(members_budget_spec(ref.name, spec.disruption.max_unavailable))
        if memory is None or memory.disruption_budget != known:
            budget = await op.kube.get_pod_disruption_budget(
                ref.namespace, members_disruption_budget_name(ref.name)
            )
            found["disruption_budget"] = DisruptionBudget(budget)
    if not spec.coordinator.is_kafka:
        found["token"] = await _token_secret(op, ref, spec)
    backend: GroupBackend | None = None
    try:
        backend = await op.backend(ref, spec)
        if isinstance(backend, KafkaBackend) and spec.coordinator.kafka is not None:
            found["kafka_settings"] = backend.settings
            found["client_config"] = await op.observed.secret(
                op.kube, ref.namespace, client_config_secret_name(ref.name)
            )
        if spec.coordinator.is_kafka:
            wanted = {topic.name: topic.partitions for topic in spec.topics}
            found["topic_partitions"] = await backend.topic_partitions(wanted)
        else:
            found["topic_partitions"] = await op.coordinator.topic_metadata()
        if isinstance(backend, KafkaBackend):
            described, found["consumer_group"] = await backend.describe_typed(spec.group_id)
            if pending(spec, (m.protocol for m in members_of(pods) if not m.deleting)):
                found["broker"] = await backend.broker_facts()
        else:
            described = await backend.describe(spec.group_id)
    except CoordinatorUnreachable as error:
        if not spec.coordinator.is_kafka and not op.acting():
            # The embedded coordinator's store was given up during the pass (passes run
            # only while this replica holds it, `Operator.acting`): the active one reports.
            raise NotActing(str(error)) from error
        message = (
            f"Kafka cluster {spec.coordinator.bootstrap_servers} unreachable: {error}"
            if spec.coordinator.is_kafka
            else str(error)
        )
        found["unreachable"] = Unreachable(UNREACHABLE, message)
        return replace(base, **found), None
    except KafkaAccessError as error:
        message = f"Kafka cluster {spec.coordinator.bootstrap_servers}: {error}"
        found["unreachable"] = Unreachable(error.reason, message)
        return replace(base, **found), None
    found["described"] = described
    last_read = memory.lag_read if memory is not None and memory.lag_read else base.status.lag_time
    if lag_due(last_read, base.now):
        if isinstance(backend, KafkaBackend):
            found["lag"] = await _lag(backend, spec)
            found["lag_tried"] = True
        elif spec.source is not None:
            found["lag"] = await _embedded_lag(op, ref, spec, spec.source.kafka)
            found["lag_tried"] = True
    if spec.coordinator.is_kafka:
        if op.journal is not None and found.get("consumer_group") is None:
            # Classic groups only: a consumer group's reassignments are not in DescribeGroups'
            # member assignments (docs/kafka.md, "The consumer protocol").
            op.journal.observe(described, base.now)
    else:
        found["coordinator_now_ms"] = op.coordinator.clock.now_ms()
        expected = op.coordinator.expected_members(spec.group_id)
        if expected is not None:
            found["expected_members"] = ExpectedMembers(expected.instance_ids, expected.deadline_ms)
        found["ready_standbys"] = frozenset(op.coordinator.standbys(spec.group_id).standby_ids)
    return replace(base, **found), backend


async def observe_member_token(
    op: Operator, ref: GroupRef, body: Mapping[str, Any], spec: ConsumerGroupSpec
) -> GroupObservation:
    """Only what the member token's part of a pass reads (the admission webhook's)."""
    return replace(_base(op, ref, body), spec=spec, token=await _token_secret(op, ref, spec))


def _base(op: Operator, ref: GroupRef, body: Mapping[str, Any]) -> GroupObservation:
    """The object, its status and the pass's own clock reading and id."""
    return GroupObservation(
        ref=ref,
        body=body,
        status=read_status(body),
        now=op.clock(),
        coordinator_url=op.coordinator_url,
        pass_id=uuid.uuid4().hex[:12],
        member_token_audience=op.member_token_audience,
        member_health_port=op.member_health_port,
    )


async def _token_secret(op: Operator, ref: GroupRef, spec: ConsumerGroupSpec) -> TokenSecret:
    name, key = token_secret_ref(spec, ref.name)
    secret = await op.observed.secret(op.kube, ref.namespace, name)
    needed = needs_group_token(spec, op.member_token_audience is not None)
    return TokenSecret(name, key, spec.token_secret_ref is not None, secret, needed)


async def _lag(backend: KafkaBackend, spec: ConsumerGroupSpec) -> LagReading | None:
    """The group's offsets for lag; None when the cluster does not answer or refuses (the
    pass goes on: a lag figure is never worth a failed pass)."""
    try:
        return await backend.lag_reading(spec.group_id, [topic.name for topic in spec.topics])
    except (CoordinatorUnreachable, KafkaAccessError) as error:
        logger.warning("lag of group %s not read: %s", spec.group_id, error)
        return None


async def _embedded_lag(
    op: Operator, ref: GroupRef, spec: ConsumerGroupSpec, source: KafkaSourceSpec
) -> LagReading | None:
    """An embedded group's offsets for lag: log ends from its source cluster (with the
    operator's connection of spec.source.kafka), commits from the embedded coordinator.
    None when the cluster does not answer or refuses, or its Secrets are missing: the
    group's own work does not depend on that cluster, so this is a warning, not Degraded."""
    try:
        settings = await read_client_settings(
            op.kube, op.observed, ref.namespace, source, op.kafka_settings, "spec.source.kafka"
        )
        cluster = await op.kafka.for_group(str(ref), source.bootstrap_servers, settings)
        log_ends = await cluster.log_ends([topic.name for topic in spec.topics])
    except (CoordinatorUnreachable, KafkaAccessError) as error:
        logger.warning(
            "lag of group %s not read from %s: %s", spec.group_id, source.bootstrap_servers, error
        )
        return None
    fetched = await op.coordinator.fetch_offsets(OffsetFetchRequest(spec.group_id))
    return LagReading(log_ends=log_ends, committed=committed_of(fetched))
