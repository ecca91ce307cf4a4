"""Act: carry one planned pass out. The only code of a pass that writes.

A status that records intent goes first (write-ahead: a rollout step or a promotion is
recorded before it is made, so an operator killed mid-step resumes without repeating or
skipping one), then the Events, then the actions in order; a status that only reports what
was seen goes after the actions, so an action (a replacement pod) does not wait for it.
Every write to the API server is laid over the cluster as last seen (observed.py: read your
writes) until the watch shows it. An action's failure raises: the pass runner tries the
group again, and the next pass observes what was done and plans from there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from coordinator import ErrorCode
from coordinator.server import AuthConfigError
from staticfleet_operator import adopted
from staticfleet_operator.actions import (
    Action,
    ClearExpectedMembers,
    CreatePod,
    CreatePodDisruptionBudget,
    CreateSecret,
    CreateTokenSecret,
    DeletePod,
    Event,
    ExpectMembers,
    LeaveForStandbys,
    LeaveGroup,
    PassResult,
    PatchPodDisruptionBudget,
    PatchSecret,
    PromoteStandbys,
    RaiseTopicPartitions,
    RegisterToken,
    SettleSlots,
    UnregisterTokens,
)
from staticfleet_operator.backends import GroupBackend, KafkaBackend, leave_errors
from staticfleet_operator.context import Operator
from staticfleet_operator.crd import ConsumerGroupSpec, ConsumerGroupStatus, PromotionStatus
from staticfleet_operator.group_memory import GroupMemory
from staticfleet_operator.group_observation import GroupObservation
from staticfleet_operator.hot_standby import Outcome, promoted_patch, promotion_outcome
from staticfleet_operator.kube import Conflict, NotFound
from staticfleet_operator.lag import lag_figure
from staticfleet_operator.members import budget_key, members_budget_spec
from staticfleet_operator.observed import pod_identity
from staticfleet_operator.pass_plan import TOKEN_UNAVAILABLE
from staticfleet_operator.status import status_differs
from staticfleet_operator.tokens import MANAGED_TOKEN_KEY, managed_secret, new_token, secret_value

log = logging.getLogger("staticfleet.operator")

# A pass's member token step (pass_plan.py): what the readiness gate waits for.
_TOKEN_ACTIONS = (CreateTokenSecret, RegisterToken, UnregisterTokens)


class Actuator:
    """Applies one `PassResult` for the group `observation` was taken of."""

    def __init__(
        self,
        op: Operator,
        observation: GroupObservation,
        memory: GroupMemory,
        backend: GroupBackend | None,
    ) -> None:
        self.op = op
        self.observation = observation
        self.memory = memory
        self.backend = backend
        self.ref = observation.ref

    async def apply(self, result: PassResult) -> str:
        """Status, Events, actions, memory and gauges; what the pass did (for logs)."""
        self.op.memories.remember(self.memory, result.remember)
        if result.write_ahead:
            await self._report(result)
        summary = result.summary
        gauges = result.gauges
        tokens_done = False
        for action in result.actions:
            if not tokens_done and not isinstance(action, _TOKEN_ACTIONS):
                # The token step is done (plan order: it comes first): readiness waits for
                # nothing more of this pass. A later action may fail for want of readiness
                # itself: a pod create goes through the pod webhook, whose Service routes only
                # to a Ready operator (a restart that finds a member pod missing, as after a
                # full drain: docs/node.md, scenario 11c).
                self.op.tokens_gate.reconciled(self.ref)
                tokens_done = True
            if isinstance(action, SettleSlots):
                left, slots = await self._settle(action)
                gauges = replace(gauges, slots=slots) if gauges is not None else None
                summary = f"adopted: left {left}" if left else summary
            elif isinstance(action, PromoteStandbys):
                summary = await self._promote(action.records)
            elif isinstance(action, LeaveForStandbys):
                summary = await self._leave_for_standbys(action)
            else:
                await self._apply(action)
        if not result.write_ahead:
            await self._report(result)
        if result.poll:
            self.op.metrics.kafka_reached(self.ref.namespace, self.ref.name, result.unreachable)
        if gauges is not None:
            self.op.metrics.observe_group(
                self.ref.namespace,
                self.ref.name,
                desired=gauges.desired,
                ready=gauges.ready,
                slots=gauges.slots,
                phase=gauges.phase,
                blocker=gauges.blocker,
                missing_expected=gauges.missing_expected,
                standbys=gauges.standbys,
                converged=gauges.converged,
                group_epoch=gauges.group_epoch,
                lag=gauges.lag,
                lag_partitions=gauges.lag_partitions,
            )
        self._serve_lag(result.status or self.observation.status)
        return summary

    def _serve_lag(self, status: ConsumerGroupStatus) -> None:
        """An embedded group's lag with spec.source, as status shows it, for the coordinator
        server's lag route; a Kafka group's is on its cluster (KEDA's Kafka scaler)."""
        spec = self.observation.spec
        if spec is None or spec.coordinator.is_kafka:
            return
        figure = None
        if spec.source is not None:
            figure = lag_figure(
                spec.group_id, status.lag, status.lag_partitions_without_commit, status.lag_time
            )
        if figure is None:
            self.op.lag_figures.pop(spec.group_id, None)
        else:
            self.op.lag_figures[spec.group_id] = figure

    async def _report(self, result: PassResult) -> None:
        """The status, then the Events."""
        if result.status is not None:
            await self.write_status(result.status)
        for event in result.events:
            await self.post(event)

    # --- writes ------------------------------------------------------------------------

    async def write_status(self, status: ConsumerGroupStatus) -> bool:
        """Patch status when it differs from what the object carries; True when written.
        Until the watch shows the write, passes read it (observed.py)."""
        body = await self.op.observed.group(self.op.kube, self.ref.namespace, self.ref.name)
        if body is not None and not status_differs(body, status):
            return False
        written = await self.op.kube.patch_group_status(
            self.ref.namespace, self.ref.name, status.to_patch()
        )
        self.op.observed.group_written(written)
        self.op.status_writes += 1
        return True

    async def post(self, event: Event) -> None:
        if event.warning:
            log.warning("%s: %s: %s", self.ref, event.reason, event.message)
        await self.op.kube.post_event(
            self.observation.body, event.reason, event.message, warning=event.warning
        )

    async def _apply(self, action: Action) -> None:
        match action:
            case CreatePod(manifest):
                await self._create_pod(manifest)
            case DeletePod(name, bounce):
                await self._delete_pod(name)
                if bounce is not None:
                    self.op.metrics.bounced(self.ref.namespace, self.ref.name, bounce)
            case LeaveGroup(instance_ids, why):
                await self._leave(instance_ids, why)
            case ExpectMembers(instance_ids, timeout_ms):
                await self.op.coordinator.set_expected_members(
                    self._spec.group_id, list(instance_ids), timeout_ms
                )
            case ClearExpectedMembers():
                await self.op.coordinator.clear_expected_members(self._spec.group_id)
            case RaiseTopicPartitions(partitions):
                await self.op.coordinator.set_topic_metadata(dict(partitions))
            case CreateTokenSecret(group_id):
                await self._create_token_secret(group_id)
            case RegisterToken(group_id, token):
                await self._register_token(group_id, token)
            case UnregisterTokens(group_ids):
                if self.op.authenticator is not None:
                    for group_id in group_ids:
                        self.op.authenticator.remove_group(group_id)
            case CreateSecret(manifest):
                await self._create_secret(manifest)
            case PatchSecret(name, patch):
                patched = await self.op.kube.patch_secret(self.ref.namespace, name, dict(patch))
                self.op.observed.secret_created(patched)
                log.info("%s: updated Secret %s", self.ref, name)
            case CreatePodDisruptionBudget(manifest):
                try:
                    await self.op.kube.create_pod_disruption_budget(
                        self.ref.namespace, dict(manifest)
                    )
                except Conflict:
                    return  # made meanwhile: the next pass reads, compares and patches it
                self._budget_written()
                log.info("%s: created PodDisruptionBudget", self.ref)
            case PatchPodDisruptionBudget(name, patch):
                await self.op.kube.patch_pod_disruption_budget(self.ref.namespace, name, patch)
                self._budget_written()
                log.info("%s: updated PodDisruptionBudget %s", self.ref, name)
            case PromoteStandbys() | LeaveForStandbys() | SettleSlots():
                raise AssertionError(f"{action} is applied by `apply`")

    def _budget_written(self) -> None:
        """The members' budget is as the spec wants: later passes need not read it."""
        wanted = members_budget_spec(self.ref.name, self._spec.disruption.max_unavailable)
        self.memory.disruption_budget = budget_key(wanted)

    async def _settle(self, action: SettleSlots) -> tuple[list[str], int]:
        """The adopted slot table kept true to the pods (adopted.py); the instance ids that
        left and the slots in use."""
        return await adopted.settle_slots(
            self.memory,
            self._spec,
            action.pods,
            action.view,
            self.observation.now,
            lambda ids: self._leave(ids, "no replacement within the grace period"),
        )

    @property
    def _spec(self) -> ConsumerGroupSpec:
        spec = self.observation.spec
        assert spec is not None  # actions are planned for valid specs only
        return spec

    async def _create_pod(self, manifest: object) -> None:
        """A pod that exists already (created by an earlier pass the watch has not shown
        yet) is left to the watch."""
        assert isinstance(manifest, dict)
        try:
            created = await self.op.kube.create_pod(self.ref.namespace, manifest)
        except Conflict:
            log.info("%s: pod %s exists already", self.ref, manifest["metadata"]["name"])
            return
        self.op.observed.pod_created(self.ref.namespace, self.ref.name, created)

    async def _delete_pod(self, name: str) -> None:
        pods = await self.op.observed.member_pods(self.op.kube, self.ref.namespace, self.ref.name)
        uids = [pod_identity(p) for p in pods if (p.get("metadata") or {}).get("name") == name]
        await self.op.kube.delete_pod(self.ref.namespace, name)
        self.op.observed.pod_deleted(self.ref.namespace, self.ref.name, uids)

    async def _leave(self, instance_ids: Sequence[str], why: str) -> None:
        """One batch LeaveGroup, its per-member errors reported in an Event."""
        assert self.backend is not None  # observed with the group's coordinator
        response = await self.backend.leave(self._spec.group_id, instance_ids)
        problems = leave_errors(response)
        log.info(
            "batch LeaveGroup %s for %s: %s", self._spec.group_id, instance_ids, problems or "ok"
        )
        self.op.metrics.batch_left(self.ref.namespace, self.ref.name, len(instance_ids))
        message = f"batch LeaveGroup for {', '.join(instance_ids)} ({why})"
        if problems:
            await self.post(Event("LeaveGroupFailed", f"{message}: {'; '.join(problems)}", True))
        else:
            await self.post(Event("MembersLeft", message))

    async def _create_token_secret(self, group_id: str) -> None:
        manifest = managed_secret(
            self.ref.namespace, self.ref.name, self.observation.uid, new_token()
        )
        name = str(manifest["metadata"]["name"])
        try:
            secret = await self.op.kube.create_secret(self.ref.namespace, manifest)
        except Conflict:
            # Another pass (or replica) created it first: use theirs.
            found = await self.op.kube.get_secret(self.ref.namespace, name)
            if found is None:
                return  # deleted again: the next pass makes it
            secret = found
        else:
            self.op.observed.secret_created(secret)
            log.info("created member token Secret %s/%s", self.ref.namespace, name)
        token = secret_value(secret, MANAGED_TOKEN_KEY)
        if token is not None:
            await self._register_token(group_id, token)

    async def _register_token(self, group_id: str, token: str) -> None:
        if self.op.authenticator is None:
            return
        try:
            self.op.authenticator.set_member_tokens(group_id, [token])
        except AuthConfigError as error:
            # The authenticator's own refusal (an admin token reused as a member token):
            # reported like any unusable token.
            self.op.authenticator.remove_group(group_id)
            self.memory.token_group_id = None
            problem = f"member token unavailable: {error}"
            if self.memory.reported.get(TOKEN_UNAVAILABLE) != problem:
                self.memory.reported[TOKEN_UNAVAILABLE] = problem
                await self.post(Event(TOKEN_UNAVAILABLE, problem, True))

    async def _create_secret(self, manifest: object) -> None:
        assert isinstance(manifest, dict)
        try:
            created = await self.op.kube.create_secret(self.ref.namespace, manifest)
        except Conflict:
            return  # made meanwhile: the next pass compares and patches it
        self.op.observed.secret_created(created)
        log.info("%s: wrote Secret %s", self.ref, manifest["metadata"]["name"])

    async def _leave_for_standbys(self, action: LeaveForStandbys) -> str:
        """Each takeover on a consumer-protocol Kafka group: a static leave (epoch -2) for the
        dead pod's member id, so the slot's waiting standby joins in its place with its
        partitions (no group epoch bump); then the status records what became of them."""
        status = self.observation.status.model_copy(deep=True)
        status.promotions = list(action.records)
        done: list[str] = []
        for record, member_id in zip(action.records, action.member_ids, strict=True):
            code = 0
            if member_id is not None:
                if not isinstance(self.backend, KafkaBackend):
                    raise AssertionError("a static leave needs the group's Kafka backend")
                code = await self.backend.static_leave(
                    self._spec.group_id, member_id, record.instance_id
                )
            status.promotions.remove(record)
            # UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID: that member no longer holds the id (the
            # standby or the session's end took it): nothing is left to hand over.
            if code in (0, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                finished = self.op.clock()
                status.last_promotion = record.model_copy(update={"completed_at": finished})
                seconds = (finished - (record.started_at or finished)).total_seconds()
                self.op.metrics.promoted(self.ref.namespace, self.ref.name, seconds)
                if member_id is not None:
                    await self.post(
                        Event(
                            "StandbyPromoted",
                            f"static leave for {record.instance_id} (slot {record.slot}, "
                            f"{record.rule}, member {member_id}): standby {record.standby} "
                            "takes its partitions, group epoch unchanged",
                        )
                    )
                done.append(f"{record.standby} -> {record.instance_id}")
                continue
            self.op.metrics.promotion_failed(self.ref.namespace, self.ref.name)
            message = (
                f"static leave for {record.instance_id} (member {member_id}) answered Kafka "
                f"error {code}; its partitions wait for the broker's session timeout"
            )
            await self.post(Event("PromotionFailed", message, True))
        await self.write_status(status)
        return "promoted: " + ", ".join(done) if done else "promotions in flight"

    async def _promote(self, records: Sequence[PromotionStatus]) -> str:
        """Each recorded promotion: the coordinator hands the standby the instance id (the
        old holder is fenced, no rebalance), the standby's pod is relabeled into the slot;
        then the status records what became of them."""
        now = self.observation.now
        status = self.observation.status.model_copy(deep=True)
        status.promotions = list(records)
        done: list[str] = []
        for record in records:
            answer = await self.op.coordinator.promote(
                self._spec.group_id, record.standby, record.instance_id
            )
            relabeled = False
            if answer.error_code is ErrorCode.NONE:
                try:
                    patched = await self.op.kube.patch_pod(
                        self.ref.namespace,
                        record.standby,
                        promoted_patch(record.slot, record.instance_id),
                    )
                    self.op.observed.pod_patched(self.ref.namespace, self.ref.name, patched)
                    relabeled = True
                except NotFound:
                    # The standby's pod is gone since: the slot gets a plain replacement,
                    # whose static rejoin fences the member id the standby was given.
                    pass
            outcome = promotion_outcome(record, answer.error_code, relabeled, self.op.clock())
            if outcome is Outcome.RETRY:
                continue
            status.promotions.remove(record)
            if outcome is Outcome.PROMOTED:
                finished = self.op.clock()
                status.last_promotion = record.model_copy(update={"completed_at": finished})
                seconds = (finished - (record.started_at or now)).total_seconds()
                self.op.metrics.promoted(self.ref.namespace, self.ref.name, seconds)
                await self.post(
                    Event(
                        "StandbyPromoted",
                        f"standby {record.standby} took over {record.instance_id} (slot "
                        f"{record.slot}, {record.rule}): same assignment, no rebalance; the "
                        "old holder is fenced",
                    )
                )
                done.append(f"{record.standby} -> {record.instance_id}")
                continue
            detail = "(its pod is gone)" if answer.error_code is ErrorCode.NONE else answer.detail
            self.op.metrics.promotion_failed(self.ref.namespace, self.ref.name)
            message = (
                f"standby {record.standby} not promoted to {record.instance_id}: "
                f"{answer.error_code.name} {detail}; the slot gets a plain static replacement"
            )
            await self.post(Event("PromotionFailed", message, True))
        await self.write_status(status)
        return "promoted: " + ", ".join(done) if done else "promotions in flight"
