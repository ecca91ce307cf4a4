"""The pass over one ConsumerGroup: observe -> plan -> act, and the finalizer.

    observe (group_observation.py)  reads: the object, pods, Secrets, the coordinator
    plan_pass (pass_plan.py)        pure: status, Events, actions, what to remember
    Actuator (actuator.py)          writes: status first, then Events and actions

One pass at a time per group (its memory's lock). Every write is laid over the cluster as
last seen until the watch shows it, so the next pass — which the write's own event asks
for — reads what this one did ("read your writes").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from coordinator import ErrorCode
from coordinator.client.kafka_errors import KafkaAccessError
from staticfleet_operator.actions import PassResult, RegisterToken
from staticfleet_operator.actuator import Actuator
from staticfleet_operator.backends import NOT_SERVING, CoordinatorUnreachable, leave_errors
from staticfleet_operator.context import NotActing, Operator
from staticfleet_operator.crd import Mode, parse_spec, validate_spec
from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.kube import NamespaceTerminating
from staticfleet_operator.observer import observe, observe_member_token
from staticfleet_operator.owned import GROUP_LABEL
from staticfleet_operator.pass_plan import plan_member_token, plan_pass
from staticfleet_operator.readiness import Listed
from staticfleet_operator.rollout import CoordinatorView

log = logging.getLogger("staticfleet.operator")

__all__ = ["Operator", "RetryLater", "finalize", "reconcile", "reconcile_pass"]


class RetryLater(Exception):
    """A step that must be retried (handlers turn it into kopf.TemporaryError)."""


async def reconcile(op: Operator, ref: GroupRef) -> str:
    """One pass over a ConsumerGroup; returns what it did (for logs and tests)."""
    return (await _pass(op, ref))[0]


async def reconcile_pass(op: Operator, namespace: str, name: str) -> bool:
    """A pass requested by an event (passes.py); True when the group wants another soon:
    the pass acted (its effects are to be observed), a rollout is under way, writes of its
    own are not yet in the watch, it waits on a clock, or its Kafka cluster must be polled.
    A settled group waits for events."""
    if not op.acting():
        return False  # not the active replica: it decides nothing (taking over asks again)
    ref = GroupRef(namespace, name)
    acted_before = (op.kube.writes, op.status_writes)
    try:
        done, result = await _pass(op, ref)
    except NotActing:
        return False
    if done == "gone":
        return False
    if (op.kube.writes, op.status_writes) != acted_before:
        return True
    memory = op.memories.get(ref)
    if op.observed.pending(namespace, name) or (memory is not None and memory.timed):
        return True
    if result is None or result.invalid:
        return False  # an edit of the spec is an event
    if result.poll:
        return True
    if result.wake_in is not None and op.passes is not None:
        op.passes.request(namespace, name, delay=result.wake_in)
    return result.status is not None and result.status.rollout.active


async def _pass(op: Operator, ref: GroupRef) -> tuple[str, PassResult | None]:
    started = time.monotonic()
    result: PassResult | None = None
    op.tokens_gate.pass_started()
    try:
        memory = op.memories.of(ref)
        async with memory.lock:
            observed = await observe(op, ref)
            if observed is None:
                done = "gone"
                if await op.observed.group(op.kube, ref.namespace, ref.name) is None:
                    op.memories.drop(ref)  # deleted without our finalizer: nothing to undo
            else:
                observation, backend = observed
                result = plan_pass(observation, memory)
                try:
                    done = await Actuator(op, observation, memory, backend).apply(result)
                except NamespaceTerminating as error:
                    # The namespace goes, and the group with it (its finalizer runs): a pass
                    # refused here did nothing wrong, so it counts as no reconcile error.
                    log.info("group %s: namespace terminating: %s", ref, error.message)
                    done = "namespace terminating"
            # Gone, invalid or reconciled: nothing more to wait for before being ready.
            op.tokens_gate.reconciled(ref)
    except Exception:
        op.metrics.reconciled(time.monotonic() - started, ok=False)
        raise
    op.metrics.reconciled(time.monotonic() - started, ok=True)
    return done, result


async def sync_member_token(op: Operator, ref: GroupRef, body: Mapping[str, Any]) -> None:
    """The member token's part of a pass alone (the admission webhook's: the admitted pod's
    env references the Secret)."""
    spec = parse_spec(body.get("spec") or {})
    memory = op.memories.of(ref)
    observation = await observe_member_token(op, ref, body, spec)
    result = plan_member_token(observation, memory)
    await Actuator(op, observation, memory, None).apply(result)


async def register_listed_tokens(op: Operator, listed: Listed) -> None:
    """At start, the groups listed for readiness (readiness.py): each member token its
    Secret already holds is registered without waiting for the group's pass, and the group
    no longer holds readiness back. Only a plan that registers and reports nothing is
    applied, so this writes nothing to the API; a Secret to create or a token to report
    unusable is left to the pass. A group with no token to register (a Kafka-coordinated
    one, an invalid spec) holds nothing back either, as after its pass."""
    for ref, body in listed:
        raw = body.get("spec") or {}
        spec = None if validate_spec(raw) else parse_spec(raw)
        if spec is None or spec.coordinator.is_kafka:
            op.tokens_gate.registered(ref)
            continue
        memory = op.memories.of(ref)
        async with memory.lock:
            observation = await observe_member_token(op, ref, body, spec)
            result = plan_member_token(observation, memory)
            if result.events or not all(isinstance(a, RegisterToken) for a in result.actions):
                continue
            await Actuator(op, observation, memory, None).apply(
                PassResult(result.summary, actions=result.actions, remember=result.remember)
            )
            if result.actions and memory.token_group_id is None:
                continue  # the authenticator refused it: the pass reports why
            op.tokens_gate.registered(ref)


async def finalize(op: Operator, namespace: str, name: str, body: Mapping[str, Any]) -> str:
    """The ConsumerGroup is being deleted: its managed pods go, every member leaves in one
    batch, the coordinator drops the group, and the operator forgets it (its memory, its
    token, its Kafka connection, its series). Raises (so Kopf retries) until all of it
    holds."""
    if not op.acting():
        raise RetryLater("this replica is not the active one")
    ref = GroupRef(namespace, name)
    memory = op.memories.of(ref)
    async with memory.lock:
        op.tokens_gate.reconciled(ref)  # going: nothing to wait for
        if validate_spec(body.get("spec") or {}):
            _forget(op, ref)
            return "invalid spec: nothing was created"
        spec = parse_spec(body.get("spec") or {})
        if spec.mode is Mode.MANAGED:
            pods = await op.kube.list_pods(namespace, {GROUP_LABEL: name})
            for pod in pods:
                if not (pod.get("metadata") or {}).get("deletionTimestamp"):
                    await op.kube.delete_pod(namespace, str(pod["metadata"]["name"]))
            left = await op.kube.list_pods(namespace, {GROUP_LABEL: name})
            if left:
                raise RetryLater(f"{len(left)} member pod(s) still terminating")
        try:
            backend = await op.backend(ref, spec)
        except KafkaAccessError as error:
            raise RetryLater(f"{error.reason}: {error}") from error
        if not spec.coordinator.is_kafka:
            if not op.coordinator.is_ready:
                raise RetryLater(NOT_SERVING)
            await op.coordinator.clear_expected_members(spec.group_id)
            await op.coordinator.forget_standbys(spec.group_id)
        try:
            view = CoordinatorView.from_described(await backend.describe(spec.group_id))
            instance_ids = sorted(m.instance_id for m in view.members if m.instance_id)
            if instance_ids:
                response = await backend.leave(spec.group_id, instance_ids)
                log.info(
                    "batch LeaveGroup %s for %s: %s",
                    spec.group_id,
                    instance_ids,
                    leave_errors(response) or "ok",
                )
            code = await backend.forget(spec.group_id)
        except CoordinatorUnreachable as error:
            raise RetryLater(f"the group's coordinator is unreachable: {error}") from error
        except KafkaAccessError as error:
            refused = f"the group's Kafka cluster refused: {error.reason}: {error}"
            raise RetryLater(refused) from error
        if code not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
            raise RetryLater(f"the coordinator kept group {spec.group_id}: {code.name}")
        if op.authenticator is not None:
            op.authenticator.remove_group(spec.group_id)
        _forget(op, ref)
        await op.kafka.release(str(ref))
        return f"finalized: left {instance_ids}"


def _forget(op: Operator, ref: GroupRef) -> None:
    """Drop the group's memory as a whole, its registered token and its series."""
    memory = op.memories.drop(ref)
    if memory is not None and memory.token_group_id is not None and op.authenticator is not None:
        op.authenticator.remove_group(memory.token_group_id)
    if memory is not None and memory.group_id is not None:
        op.lag_figures.pop(memory.group_id, None)
    op.metrics.forget_group(ref.namespace, ref.name)
