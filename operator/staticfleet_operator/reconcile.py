"""Glue: observe (pods + describe) -> plan (pure: rollout/fleet.py) -> act (one step per pass).

Each pass takes at most one kind of action — the one `plan` returns: scale down, a batch
LeaveGroup, a Switch step, create missing members, refuse, or one rollout step — and then
writes status; the next pass observes the result ("read your writes"). The rollout state is
written to status *before* its action (write-ahead), so an operator killed mid-step resumes
without repeating or skipping a member. Adopted groups keep their slot table (adopted.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from coordinator import DescribedGroup, ErrorCode, GroupCoordinator, GroupState
from coordinator.client.kafka_errors import KafkaAccessError
from coordinator.client.kafka_settings import PLAINTEXT_SETTINGS, KafkaClientSettings
from coordinator.server import AuthConfigError, Authenticator
from staticfleet_operator import adopted
from staticfleet_operator.backends import (
    CoordinatorUnreachable,
    EmbeddedBackend,
    GroupBackend,
    KafkaBackend,
    KafkaBackends,
    leave_errors,
    widen_offers,
)
from staticfleet_operator.crd import (
    ConsumerGroupSpec,
    Mode,
    parse_spec,
    validate_spec,
)
from staticfleet_operator.hot_standby import keep_standbys, promote_standbys, standbys_ready
from staticfleet_operator.identity import SlotAllocator
from staticfleet_operator.kafka_auth import read_client_settings, referenced_secrets
from staticfleet_operator.kafka_clients import (
    client_config_files,
    client_config_secret,
    client_config_secret_name,
)
from staticfleet_operator.kafka_journal import RebalanceJournal
from staticfleet_operator.kube import Conflict, KubeApi
from staticfleet_operator.members import MemberSettings, managed_pod, members_of, template_hash
from staticfleet_operator.metrics import OperatorMetrics
from staticfleet_operator.observed import Observed, pod_identity
from staticfleet_operator.owned import GROUP_LABEL, secret_data
from staticfleet_operator.passes import Passes
from staticfleet_operator.readiness import TokensGate
from staticfleet_operator.rollout import (
    Bounce,
    CoordinatorView,
    Decision,
    Done,
    MemberPod,
    Pause,
    RolloutStatus,
)
from staticfleet_operator.rollout.fleet import (
    CreateMissing,
    FleetObservation,
    Leave,
    Refuse,
    Rollout,
    ScaleDown,
    Switch,
    assignors,
    desired_protocol,
    new_pod_protocol,
    plan,
)
from staticfleet_operator.scale_up import expected_on_create, seconds_until_expiry, should_clear
from staticfleet_operator.status import (
    invalid_spec_status,
    observed_status,
    read_status,
)
from staticfleet_operator.tokens import TokenUnavailable, read_member_token, token_secret_ref

log = logging.getLogger("staticfleet.operator")

# How long an admitted pod may take to appear in a listing (the API server's admission
# timeout is at most 30 s).
ADMISSION_GRACE_SECONDS = 30.0


@dataclass
class Operator:
    """What every handler shares: the embedded coordinator, the API adapter, the slots."""

    coordinator: GroupCoordinator
    kube: KubeApi
    coordinator_url: str
    allocator: SlotAllocator = field(default_factory=SlotAllocator)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    # Groups whose slot table was read back from pod annotations since this process started.
    rebuilt: set[str] = field(default_factory=set)
    # Pod keys the webhook granted a slot to, and when: until the API server has created the
    # pod, a pass that does not see it yet must not take its slot back.
    admitted: dict[str, datetime] = field(default_factory=dict)
    # The embedded server's authenticator: each group's member token is registered with it.
    # None: no server to tell (member tokens are still put in Secrets and pod env).
    authenticator: Authenticator | None = None
    # group key -> the group id its member token is registered for (to unregister it).
    token_groups: dict[str, str] = field(default_factory=dict)
    # group key -> the last token problem reported (an Event once per problem, not per pass).
    token_problems: dict[str, str] = field(default_factory=dict)
    # Prometheus series (the process passes the coordinator server's registry in).
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    # Readiness after a restart: told of each group whose token was reconciled (readiness.py).
    tokens_gate: TokensGate = field(default_factory=TokensGate)
    # Connections to the Kafka clusters of Kafka-coordinated groups, one per bootstrap list
    # and settings.
    kafka: KafkaBackends = field(default_factory=KafkaBackends)
    # The operator's own Kafka settings for groups without spec.coordinator.kafka
    # (`operator run --kafka-config`).
    kafka_settings: KafkaClientSettings = PLAINTEXT_SETTINGS
    # Rebalances of Kafka-coordinated groups as seen by describe (None: not recorded).
    journal: RebalanceJournal | None = None
    # group key -> the last problem reported by an Event (once per problem, not per pass).
    reported: dict[str, str] = field(default_factory=dict)
    # Kopf's indices and the writes they do not show yet: what a pass reads (observed.py).
    observed: Observed = field(default_factory=Observed)
    # group id -> (namespace, name): whose pass a coordinator journal entry requests.
    group_keys: dict[str, tuple[str, str]] = field(default_factory=dict)
    # (namespace, Secret name) -> the groups whose member token it holds.
    secret_users: dict[tuple[str, str], set[tuple[str, str]]] = field(default_factory=dict)
    # Status patches written (with `kube.writes`: whether a pass acted).
    status_writes: int = 0
    # Groups whose last pass waits on a clock (an adopted slot's grace period).
    timed: set[str] = field(default_factory=set)
    # Runs the passes events ask for (passes.py); made by the handlers on first use.
    passes: Passes | None = None

    async def backend(self, namespace: str, name: str, spec: ConsumerGroupSpec) -> GroupBackend:
        """The group's coordinator: the Kafka cluster it names (reached with the settings
        of spec.coordinator.kafka and its Secrets, read now: a rotation takes effect on
        this pass), else the embedded one. Raises `KafkaAccessError` (e.g.
        KafkaCredentialsMissing) when the settings cannot be made."""
        coordinator = spec.coordinator
        if not (coordinator.is_kafka and coordinator.bootstrap_servers):
            return EmbeddedBackend(self.coordinator)
        for secret in referenced_secrets(coordinator.kafka):
            # A rotated or deleted Secret wakes the group (handlers.secret_changed).
            self.secret_users.setdefault((namespace, secret), set()).add((namespace, name))
        settings = await read_client_settings(
            self.kube, self.observed, namespace, coordinator.kafka, self.kafka_settings
        )
        return await self.kafka.for_group(
            group_key(namespace, name), coordinator.bootstrap_servers, settings
        )

    def recently_admitted(self, pod_key: str, now: datetime) -> bool:
        since = self.admitted.get(pod_key)
        return since is not None and (now - since).total_seconds() < ADMISSION_GRACE_SECONDS

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        """One pass at a time per ConsumerGroup (timer, delete and webhook may overlap)."""
        return self._locks.setdefault(f"{namespace}/{name}", asyncio.Lock())

    async def write_status(self, body: Mapping[str, Any], patch: dict[str, Any]) -> bool:
        """Patch status when it differs from what the object carries; True when written.
        Until the watch shows the write, passes read it (observed.py)."""
        current = _without_nulls(body.get("status") or {})
        if all(current.get(key) == value for key, value in _without_nulls(patch).items()):
            return False
        metadata = body.get("metadata") or {}
        written = await self.kube.patch_group_status(
            str(metadata["namespace"]), str(metadata["name"]), patch
        )
        self.observed.group_written(written)
        self.status_writes += 1
        return True

    async def create_pod(
        self, namespace: str, group: str, pod: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Create a group's pod; until the watch shows it, passes see it. One that exists
        already (created by an earlier pass the watch has not shown yet) is left to the watch."""
        try:
            created = await self.kube.create_pod(namespace, pod)
        except Conflict:
            log.info("%s/%s: pod %s exists already", namespace, group, pod["metadata"]["name"])
            return None
        self.observed.pod_created(namespace, group, created)
        return created

    async def delete_pod(self, namespace: str, group: str, pod_name: str) -> bool:
        """Delete a group's pod; until the watch shows it terminating, passes see it so."""
        pods = await self.observed.member_pods(self.kube, namespace, group)
        uids = [
            pod_identity(pod) for pod in pods if (pod.get("metadata") or {}).get("name") == pod_name
        ]
        deleted = await self.kube.delete_pod(namespace, pod_name)
        self.observed.pod_deleted(namespace, group, uids)
        return deleted

    async def patch_pod(
        self, namespace: str, group: str, pod_name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Patch a group's pod (a promoted standby's labels); passes read the patched pod
        until the watch shows it."""
        patched = await self.kube.patch_pod(namespace, pod_name, patch)
        self.observed.pod_patched(namespace, group, patched)
        return patched

    def settings(self, name: str) -> MemberSettings:
        return MemberSettings(coordinator_url=self.coordinator_url, group_name=name)


async def reconcile(op: Operator, namespace: str, name: str) -> str:
    """One pass over a ConsumerGroup; returns what it did (for logs and tests)."""
    started = time.monotonic()
    try:
        async with op.lock(namespace, name):
            body = await op.observed.group(op.kube, namespace, name)
            if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
                done = "gone"
            else:
                done = await _reconcile(op, body)
            # Gone, invalid or reconciled: nothing more to wait for before being ready.
            op.tokens_gate.reconciled(group_key(namespace, name))
    except Exception:
        op.metrics.reconciled(time.monotonic() - started, ok=False)
        raise
    op.metrics.reconciled(time.monotonic() - started, ok=True)
    return done


async def reconcile_pass(op: Operator, namespace: str, name: str) -> bool:
    """A pass requested by an event (passes.py); True when the group wants another soon:
    the pass acted (its effects are to be observed), a rollout is under way, writes of its
    own are not yet in the watch, or it waits on a clock. A settled group waits for events."""
    acted_before = (op.kube.writes, op.status_writes)
    done = await reconcile(op, namespace, name)
    if done == "gone":
        op.group_keys = {g: k for g, k in op.group_keys.items() if k != (namespace, name)}
        return False
    if (op.kube.writes, op.status_writes) != acted_before:
        return True
    if op.observed.pending(namespace, name) or group_key(namespace, name) in op.timed:
        return True
    body = await op.observed.group(op.kube, namespace, name)
    if body is None or validate_spec(body.get("spec") or {}):
        return False  # an edit of the spec is an event
    spec = parse_spec(body.get("spec") or {})
    if spec.coordinator.is_kafka:
        # A Kafka cluster tells the operator nothing: its describe is polled.
        return True
    _wake_at_registration_expiry(op, namespace, name, spec)
    return read_status(body).rollout.active


def _wake_at_registration_expiry(
    op: Operator, namespace: str, name: str, spec: ConsumerGroupSpec
) -> None:
    """A pending pre-registration wants one pass, at its deadline (to clear it): a timer
    for the group, not a pass every interval (at a thousand groups each replacement pod's
    registration kept its group polling until it expired)."""
    expansion = op.coordinator.expected_members(spec.group_id)
    if expansion is None or op.passes is None:
        return
    due = seconds_until_expiry(expansion.deadline_ms, op.coordinator.clock.now_ms())
    if due is not None:
        op.passes.request(namespace, name, delay=due)


async def _reconcile(op: Operator, body: Mapping[str, Any]) -> str:
    metadata = body.get("metadata") or {}
    generation = metadata.get("generation")
    previous = read_status(body)
    now = op.clock()
    problems = validate_spec(body.get("spec") or {})
    if problems:
        status = invalid_spec_status(previous, generation, problems, now)
        if await op.write_status(body, status.to_patch()):
            await op.kube.post_event(body, "InvalidSpec", "; ".join(problems), warning=True)
        return "invalid spec"
    spec = parse_spec(body.get("spec") or {})
    try:
        return await _reconcile_valid(op, body, spec)
    except CoordinatorUnreachable as error:
        message = f"Kafka cluster {spec.coordinator.bootstrap_servers} unreachable: {error}"
        return await _unreachable(op, body, spec, UNREACHABLE, message)
    except KafkaAccessError as error:
        # Refused, not unreachable: its own reason (KafkaAuthenticationFailed, ...).
        message = f"Kafka cluster {spec.coordinator.bootstrap_servers}: {error}"
        return await _unreachable(op, body, spec, error.reason, message)


UNREACHABLE = "CoordinatorUnreachable"


async def _unreachable(
    op: Operator, body: Mapping[str, Any], spec: ConsumerGroupSpec, reason: str, message: str
) -> str:
    """The group's Kafka cluster did not answer, or refused the operator (`reason`): say so
    in status and an Event (once per problem), and do nothing else: no pod is created,
    deleted or bounced on a guess. The next pass comes at the usual poll interval."""
    metadata = body.get("metadata") or {}
    namespace, name = str(metadata["namespace"]), str(metadata["name"])
    previous = read_status(body)
    pods = members_of(await op.observed.member_pods(op.kube, namespace, name))
    status = observed_status(
        previous,
        generation=metadata.get("generation"),
        view=None,
        selected_protocol=None,
        pods=pods,
        expected_members=spec.replicas if spec.replicas is not None else len(pods),
        rollout=previous.rollout,
        now=op.clock(),
        degraded_reason=reason,
        degraded_message=message,
    )
    await op.write_status(body, status.to_patch())
    await _report_once(op, body, reason, message)
    return "coordinator unreachable" if reason == UNREACHABLE else f"refused: {reason}"


async def _report_once(op: Operator, body: Mapping[str, Any], reason: str, message: str) -> None:
    """A Warning Event for a problem, once until its message changes or it clears (one
    slot per reason, so two standing problems do not take turns)."""
    metadata = body.get("metadata") or {}
    key = f"{group_key(str(metadata['namespace']), str(metadata['name']))}/{reason}"
    if op.reported.get(key) != message:
        op.reported[key] = message
        log.warning("%s: %s", key, message)
        await op.kube.post_event(body, reason, message, warning=True)


def _reachable_again(op: Operator, namespace: str, name: str) -> None:
    """The coordinator answered: a later outage or refusal is reported again."""
    prefix = f"{group_key(namespace, name)}/"
    for key in [k for k in op.reported if k.startswith(prefix)]:
        reason = key.removeprefix(prefix)
        # The access reasons are all Kafka*: KafkaAuthenticationFailed, ...
        if reason == UNREACHABLE or reason.startswith("Kafka"):
            del op.reported[key]


async def _reconcile_valid(op: Operator, body: Mapping[str, Any], spec: ConsumerGroupSpec) -> str:
    metadata = body.get("metadata") or {}
    namespace, name = str(metadata["namespace"]), str(metadata["name"])
    generation = metadata.get("generation")
    previous = read_status(body)
    now = op.clock()
    op.group_keys[spec.group_id] = (namespace, name)
    backend = await op.backend(namespace, name, spec)
    if not spec.coordinator.is_kafka:
        await sync_member_token(op, body, spec)
    elif spec.coordinator.kafka is not None and spec.mode is Mode.MANAGED:
        await sync_client_config(op, body, spec, backend)
    await _sync_topics(op, body, backend, spec)
    if spec.mode is Mode.ADOPTED:
        return await _reconcile_adopted(op, body, spec)

    replicas = spec.replicas or 0
    pods = await op.observed.member_pods(op.kube, namespace, name)
    members = members_of(pods)
    described = await describe(backend, spec.group_id)
    _reachable_again(op, namespace, name)
    view = group_view(op, spec, described, members)
    state = previous.rollout

    promoted = await promote_standbys(
        op, body, spec, pods, {i for i in view.instance_ids if i}, rollout_active=state.active
    )
    if promoted is not None:
        _observe_managed(op, namespace, name, replicas, members, state, standbys=spec)
        return promoted
    await keep_standbys(op, body, spec, pods, new_pod_protocol(spec, state, members))
    await _clear_stale_expansion(op, spec, view, replicas)

    step = plan(
        FleetObservation(
            spec=spec,
            template_hash=template_hash(spec),
            pods=tuple(members),
            view=view,
            describable=described.error_code in _DESCRIBABLE,
            rollout=state,
            now=now,
        )
    )
    if not isinstance(step, Refuse):
        op.reported.pop(f"{group_key(namespace, name)}/ProtocolChangeRefused", None)
    refused: str | None = None
    match step:
        case Rollout(decision):
            done = await _act(op, body, spec, decision, members, view, described, now)
            awaiting = len(awaiting_members(op, spec, view))
            state = decision.state
            _observe_managed(op, namespace, name, replicas, members, state, awaiting, standbys=spec)
            return done
        case ScaleDown(excess):
            for pod in excess:
                if not pod.deleting:
                    await op.delete_pod(namespace, name, pod.pod_name)
            done = f"scale-down: deleted {', '.join(p.pod_name for p in excess)}"
        case Leave(instance_ids, why):
            await _leave(op, body, backend, spec, instance_ids, why)
            joined = ", ".join(instance_ids)
            done = f"left: {joined}" if why == "scale-down" else f"switch: left {joined}"
        case Switch(running, terminating):
            done = await _switch(op, body, spec, running, terminating)
        case CreateMissing(missing, protocol):
            await _expect_members(op, body, spec, view, replicas, missing)
            for slot in missing:
                await op.create_pod(
                    namespace,
                    name,
                    managed_pod(
                        spec,
                        op.settings(name),
                        namespace=namespace,
                        owner_uid=str(metadata.get("uid", "")),
                        slot=slot,
                        protocol=protocol,
                        pod_key=uuid.uuid4().hex,
                    ),
                )
            done = f"created slots {list(missing)} with {protocol.value}"
        case Refuse(refusal):
            await _report_once(op, body, "ProtocolChangeRefused", refusal)
            refused = refusal
            done = "refused: " + refusal

    status = observed_status(
        previous,
        generation=generation,
        view=view,
        selected_protocol=described.protocol_data,
        pods=members,
        expected_members=replicas,
        rollout=state,
        now=now,
        degraded_reason=None if refused is None else "ProtocolChangeRefused",
        degraded_message=refused or "",
    )
    status.awaiting_members = awaiting_members(op, spec, view)
    status.standbys_ready = standbys_ready(op, spec)
    await op.write_status(body, status.to_patch())
    awaiting = len(status.awaiting_members)
    _observe_managed(op, namespace, name, replicas, members, state, awaiting, standbys=spec)
    return done


async def _expect_members(
    op: Operator,
    body: Mapping[str, Any],
    spec: ConsumerGroupSpec,
    view: CoordinatorView,
    replicas: int,
    creating: Sequence[int],
) -> None:
    """Before the pods exist: tell the embedded coordinator whom to expect, so the group
    rebalances once for all of them (Kafka's coordinator has no such API)."""
    if spec.coordinator.is_kafka or not spec.scale_up.pre_register:
        return
    expected = expected_on_create(spec.instance_id_prefix, replicas, creating, view.instance_ids)
    if expected is None:
        return
    timeout_ms = spec.scale_up.expansion_timeout_seconds * 1000
    await op.coordinator.set_expected_members(spec.group_id, expected, timeout_ms)
    message = (
        f"expecting {len(expected)} member(s) for up to "
        f"{spec.scale_up.expansion_timeout_seconds}s: one rebalance for the scale-up"
    )
    log.info("%s: %s", spec.group_id, message)
    await op.kube.post_event(body, "ExpectingMembers", message)


def awaiting_members(op: Operator, spec: ConsumerGroupSpec, view: CoordinatorView) -> list[str]:
    """The registration's instance ids the coordinator does not list yet (status)."""
    if spec.coordinator.is_kafka:
        return []
    expansion = op.coordinator.expected_members(spec.group_id)
    if expansion is None:
        return []
    return sorted(expansion.instance_ids - view.instance_ids)


async def _clear_stale_expansion(
    op: Operator, spec: ConsumerGroupSpec, view: CoordinatorView, replicas: int
) -> None:
    if spec.coordinator.is_kafka:
        return
    expansion = op.coordinator.expected_members(spec.group_id)
    if expansion is None:
        return
    stable = view.group_state is GroupState.STABLE
    prefix = spec.instance_id_prefix
    expired = seconds_until_expiry(expansion.deadline_ms, op.coordinator.clock.now_ms()) is None
    if should_clear(expansion.instance_ids, prefix, replicas, view.instance_ids, stable, expired):
        await op.coordinator.clear_expected_members(spec.group_id)


def group_view(
    op: Operator, spec: ConsumerGroupSpec, described: DescribedGroup, pods: Sequence[MemberPod]
) -> CoordinatorView:
    """The rules' view of a describe; for a Kafka group, each member's offers widened from
    its pod (Kafka's describe lists only the selected protocol) and the rebalances it shows
    recorded in the journal."""
    view = CoordinatorView.from_described(described)
    if not spec.coordinator.is_kafka:
        return view
    if op.journal is not None:
        op.journal.observe(described, op.clock())
    return widen_offers(view, pods, assignors(spec))


async def _switch(
    op: Operator,
    body: Mapping[str, Any],
    spec: ConsumerGroupSpec,
    running: Sequence[MemberPod],
    terminating: bool,
) -> str:
    """One step of a Switch: stop every member on the old protocol; once all are gone, one
    batch LeaveGroup for every instance id the coordinator still lists (one rebalance, at
    once, not after the session timeout); the next passes create them all on the target."""
    metadata = body.get("metadata") or {}
    namespace = str(metadata["namespace"])
    if running:
        for pod in running:
            await op.delete_pod(namespace, str(metadata["name"]), pod.pod_name)
        message = (
            f"switch to {desired_protocol(spec).value}: stopping {len(running)} member(s), "
            "then one batch LeaveGroup and a restart of all"
        )
        await op.kube.post_event(body, "ProtocolSwitch", message)
        return "switch: stopped " + ", ".join(p.pod_name for p in running)
    if terminating:
        return "switch: waiting for members to stop"
    return "switch: stopped"


async def _leave(
    op: Operator,
    body: Mapping[str, Any],
    backend: GroupBackend,
    spec: ConsumerGroupSpec,
    instance_ids: Sequence[str],
    why: str,
) -> None:
    """One batch LeaveGroup, its per-member errors reported in an Event."""
    metadata = body.get("metadata") or {}
    problems = await leave_group(backend, spec.group_id, instance_ids)
    op.metrics.batch_left(str(metadata["namespace"]), str(metadata["name"]), len(instance_ids))
    message = f"batch LeaveGroup for {', '.join(instance_ids)} ({why})"
    if problems:
        await op.kube.post_event(
            body, "LeaveGroupFailed", f"{message}: {'; '.join(problems)}", warning=True
        )
    else:
        await op.kube.post_event(body, "MembersLeft", message)


def _observe_managed(
    op: Operator,
    namespace: str,
    name: str,
    replicas: int,
    members: Sequence[MemberPod],
    state: RolloutStatus,
    awaiting: int = 0,
    *,
    standbys: ConsumerGroupSpec | None = None,
) -> None:
    op.metrics.observe_group(
        namespace,
        name,
        desired=replicas,
        ready=sum(1 for m in members if m.ready and not m.deleting),
        slots=len({m.slot for m in members}),
        phase=state.phase,
        blocker=state.blocker,
        awaiting=awaiting,
        standbys=(standbys_ready(op, standbys) or 0) if standbys is not None else 0,
    )


# Describe of a group nobody has joined yet answers GROUP_ID_NOT_FOUND: that is an observed
# empty group (the view reads Dead with no members), not a failed describe.
_DESCRIBABLE = frozenset({ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND})


async def _act(
    op: Operator,
    body: Mapping[str, Any],
    spec: ConsumerGroupSpec,
    decision: Decision,
    members: Sequence[MemberPod],
    view: CoordinatorView,
    described: DescribedGroup,
    now: datetime,
) -> str:
    """Persist the decision's state with the observed status, then take its action."""
    metadata = body.get("metadata") or {}
    previous = read_status(body)
    status = observed_status(
        previous,
        generation=metadata.get("generation"),
        view=view,
        selected_protocol=described.protocol_data,
        pods=members,
        expected_members=spec.replicas or 0,
        rollout=decision.state,
        now=now,
    )
    status.awaiting_members = awaiting_members(op, spec, view)
    status.standbys_ready = standbys_ready(op, spec)
    changed = await op.write_status(body, status.to_patch())
    if isinstance(decision, Bounce):
        log.info("%s", decision.reason)
        await op.kube.post_event(body, decision.event_reason, decision.reason)
        await op.delete_pod(str(metadata["namespace"]), str(metadata["name"]), decision.pod_name)
        op.metrics.bounced(str(metadata["namespace"]), str(metadata["name"]), decision.state.phase)
        return f"bounce slot {decision.slot} to {decision.protocol.value}"
    if changed and isinstance(decision, Pause | Done) and decision.state != RolloutStatus():
        was = previous.rollout
        if was.phase is not decision.state.phase or was.message != decision.state.message:
            warning = isinstance(decision, Pause)
            await op.kube.post_event(body, decision.event_reason, decision.reason, warning)
    return type(decision).__name__.lower()


async def _reconcile_adopted(op: Operator, body: Mapping[str, Any], spec: ConsumerGroupSpec) -> str:
    """Adopted pods are made by someone else; the webhook stamps their identity. Here the
    slot table is kept true to the pods (adopted.py), then status."""
    metadata = body.get("metadata") or {}
    namespace, name = str(metadata["namespace"]), str(metadata["name"])
    pods = await op.observed.member_pods(op.kube, namespace, name)
    # A finished pod (Succeeded/Failed: a Spark executor whose driver went away) never runs
    # again, so it is no member pod: its slot goes vacant as a deleted pod's does, for a
    # replacement to take or to retire after the grace period.
    members = [member for member in members_of(pods) if not member.finished]
    backend = await op.backend(namespace, name, spec)
    if spec.coordinator.kafka is not None:
        await sync_client_config(op, body, spec, backend)
    described = await describe(backend, spec.group_id)
    view = group_view(op, spec, described, members)

    async def leave(instance_ids: list[str]) -> None:
        await _leave(
            op, body, backend, spec, instance_ids, "no replacement within the grace period"
        )

    key = group_key(namespace, name)
    pending, slots_in_use = await adopted.settle_slots(op, key, spec, pods, view, leave)
    live = [m for m in members if not m.deleting]
    previous = read_status(body)
    rollout = previous.rollout
    status = observed_status(
        previous,
        generation=metadata.get("generation"),
        view=view,
        selected_protocol=described.protocol_data,
        pods=members,
        expected_members=len(live),
        rollout=rollout,
        now=op.clock(),
    )
    await op.write_status(body, status.to_patch())
    op.metrics.observe_group(
        namespace,
        name,
        desired=len(live),
        ready=sum(1 for m in live if m.ready),
        slots=slots_in_use,
        phase=rollout.phase,
        blocker=rollout.blocker,
    )
    return f"adopted: left {pending}" if pending else "adopted"


async def finalize(op: Operator, namespace: str, name: str, body: Mapping[str, Any]) -> str:
    """The ConsumerGroup is being deleted: its managed pods go, every member leaves in one
    batch, the coordinator drops the group. Raises (so Kopf retries) until all of it holds."""
    async with op.lock(namespace, name):
        problems = validate_spec(body.get("spec") or {})
        op.tokens_gate.reconciled(group_key(namespace, name))  # going: nothing to wait for
        if problems:
            forget_member_token(op, namespace, name, None)
            op.metrics.forget_group(namespace, name)
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
            backend = await op.backend(namespace, name, spec)
        except KafkaAccessError as error:
            raise RetryLater(f"{error.reason}: {error}") from error
        if not spec.coordinator.is_kafka:
            await op.coordinator.clear_expected_members(spec.group_id)
            await op.coordinator.forget_standbys(spec.group_id)
        try:
            view = CoordinatorView.from_described(await describe(backend, spec.group_id))
            instance_ids = sorted(m.instance_id for m in view.members if m.instance_id)
            if instance_ids:
                await leave_group(backend, spec.group_id, instance_ids)
            code = await backend.forget(spec.group_id)
        except CoordinatorUnreachable as error:
            raise RetryLater(f"the group's Kafka cluster is unreachable: {error}") from error
        except KafkaAccessError as error:
            refused = f"the group's Kafka cluster refused: {error.reason}: {error}"
            raise RetryLater(refused) from error
        if code not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
            raise RetryLater(f"the coordinator kept group {spec.group_id}: {code.name}")
        op.allocator.forget(group_key(namespace, name))
        op.rebuilt.discard(group_key(namespace, name))
        forget_member_token(op, namespace, name, spec.group_id)
        await op.kafka.release(group_key(namespace, name))
        op.metrics.forget_group(namespace, name)
        for key in [k for k in op.reported if k.startswith(group_key(namespace, name) + "/")]:
            del op.reported[key]
        return f"finalized: left {instance_ids}"


async def sync_member_token(op: Operator, body: Mapping[str, Any], spec: ConsumerGroupSpec) -> bool:
    """Read the group's member token (creating the operator-made Secret when needed) and
    register it with the embedded server for the group id; True when registered. A missing
    or unusable Secret unregisters the group's token (a deleted user Secret revokes it) and
    posts a Warning Event once."""
    metadata = body.get("metadata") or {}
    namespace, name = str(metadata["namespace"]), str(metadata["name"])
    key = group_key(namespace, name)
    previous = op.token_groups.get(key)
    if previous is not None and previous != spec.group_id:
        forget_member_token(op, namespace, name, None)  # the groupId changed
    try:
        secret_name, _ = token_secret_ref(spec, name)
        users = op.secret_users.setdefault((namespace, secret_name), set())
        users.add((namespace, name))
        token = await read_member_token(
            op.kube, namespace, name, str(metadata.get("uid", "")), spec, op.observed
        )
        if op.authenticator is not None:
            op.authenticator.set_member_tokens(spec.group_id, [token])
    except (TokenUnavailable, AuthConfigError) as error:
        reported = op.token_problems.get(key)  # forgetting the token forgets it too
        forget_member_token(op, namespace, name, spec.group_id)
        problem = f"member token unavailable: {error}"
        op.tokens_gate.reconciled(key)  # found unusable: readiness need not wait for it
        op.token_problems[key] = problem
        if reported != problem:
            log.warning("%s: %s", key, problem)
            await op.kube.post_event(body, "MemberTokenUnavailable", problem, warning=True)
        return False
    op.token_groups[key] = spec.group_id
    op.token_problems.pop(key, None)
    op.tokens_gate.reconciled(key)
    return True


def forget_member_token(op: Operator, namespace: str, name: str, group_id: str | None) -> None:
    """Unregister the group's member token from the embedded server."""
    key = group_key(namespace, name)
    registered = op.token_groups.pop(key, None)
    op.token_problems.pop(key, None)
    if op.authenticator is None:
        return
    for gid in {g for g in (registered, group_id) if g}:
        op.authenticator.remove_group(gid)


async def sync_client_config(
    op: Operator, body: Mapping[str, Any], spec: ConsumerGroupSpec, backend: GroupBackend
) -> None:
    """The group's client configuration Secret (kafka_clients.py): the settings the operator
    connects with, in the members' dialect, written when its content differs. Pods are not
    restarted for a change (docs/operator.md, "Secured clusters": rotation)."""
    if not isinstance(backend, KafkaBackend):
        return
    settings = backend.settings
    metadata = body.get("metadata") or {}
    namespace, name = str(metadata["namespace"]), str(metadata["name"])
    files = client_config_files(spec.coordinator.client_family, settings)
    data = secret_data(files)
    secret_name = client_config_secret_name(name)
    current = await op.observed.secret(op.kube, namespace, secret_name)
    if current is None:
        manifest = client_config_secret(namespace, name, str(metadata.get("uid", "")), files)
        try:
            created = await op.kube.create_secret(namespace, manifest)
        except Conflict:
            current = await op.kube.get_secret(namespace, secret_name)
        else:
            op.observed.secret_created(created)
            log.info("%s: wrote Kafka client configuration Secret %s", namespace, secret_name)
            return
    have = (current or {}).get("data") or {}
    if current is not None and have != data:
        # A merge patch: keys the new content lacks (a certificate no longer used) go.
        patch = {"data": {**{key: None for key in have if key not in data}, **data}}
        patched = await op.kube.patch_secret(namespace, secret_name, patch)
        op.observed.secret_created(patched)
        log.info("%s: updated Kafka client configuration Secret %s", namespace, secret_name)


class RetryLater(Exception):
    """A step that must be retried (handlers turn it into kopf.TemporaryError)."""


# --- small pure helpers -------------------------------------------------------------------


def group_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


async def describe(backend: GroupBackend, group_id: str) -> DescribedGroup:
    return await backend.describe(group_id)


async def leave_group(
    backend: GroupBackend, group_id: str, instance_ids: Sequence[str]
) -> list[str]:
    """One batch LeaveGroup by instance id (KIP-345): one rebalance for all of them.
    Returns the per-member problems (empty when every member left)."""
    response = await backend.leave(group_id, instance_ids)
    problems = leave_errors(response)
    log.info("batch LeaveGroup %s for %s: %s", group_id, instance_ids, problems or "ok")
    return problems


async def _sync_topics(
    op: Operator, body: Mapping[str, Any], backend: GroupBackend, spec: ConsumerGroupSpec
) -> dict[str, int]:
    """Partition counts: the spec's go to the embedded coordinator; a Kafka cluster's are
    read from it. A topic the cluster lacks is reported (members wait for it)."""
    wanted = {topic.name: topic.partitions for topic in spec.topics}
    counts = await backend.topic_partitions(wanted)
    absent = sorted(set(wanted) - set(counts))
    if absent and spec.coordinator.is_kafka:
        await _report_once(
            op, body, "TopicsNotFound", f"topics not on the Kafka cluster: {', '.join(absent)}"
        )
    return counts


def _without_nulls(value: Any) -> Any:
    """A merge patch's nulls remove keys, so compare with them gone."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value
