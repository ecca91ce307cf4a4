"""The Kopf handlers. Thin: read the event, call the glue in `reconcile`/`webhook`, return.

Registered into a given registry (not Kopf's global one), so a test or a second operator in
one process gets its own set. The shared `Operator` arrives through Kopf's `memo`.

Watch, don't poll: Kopf's index of ConsumerGroups and the operator's own informers of member
pods and Opaque Secrets (`informer.py`, started here at Kopf's startup) are what a pass and
the webhook read (`observed.py`); a watch event on a group or on one of its pods requests a
pass for the group (`passes.py`), and so does its coordinator's journal; a slow resync,
spread over all groups, is the safety net. Kopf fills its index before it calls any handler,
and reads of pods and Secrets wait for the informers' first listing, so the first passes
already see every pod; a pod or Secret deleted while a watch was down is told as deleted
when the informer lists again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from coordinator import JournalEvent
from staticfleet_operator import index_readiness
from staticfleet_operator.crd import GROUP, PLURAL, VERSION
from staticfleet_operator.informer import (
    MEMBER_PODS,
    OPAQUE_SECRETS,
    Informer,
    interned,
    trimmed,
)
from staticfleet_operator.kube import KubeApi
from staticfleet_operator.owned import GROUP_LABEL
from staticfleet_operator.passes import Passes
from staticfleet_operator.reconcile import Operator, RetryLater, finalize, reconcile_pass
from staticfleet_operator.webhook import admit_pod

# How soon a group that is not settled (a rollout under way, pods not yet as wanted, an
# adopted slot in its grace period) gets its next pass.
DEFAULT_INTERVAL_SECONDS = 2.0
# The safety net: every group gets a pass this often even when nothing was seen to change.
DEFAULT_RESYNC_SECONDS = 60.0


def register(
    registry: kopf.OperatorRegistry,
    *,
    interval: float = DEFAULT_INTERVAL_SECONDS,
    resync: float = DEFAULT_RESYNC_SECONDS,
    webhook: bool = True,
    namespaces: Sequence[str] = (),
    secret_watch: bool = True,
) -> None:
    """Add the operator's handlers to `registry`. Without `webhook` the mutating handler is
    left out (Kopf refuses admission handlers when no webhook server is configured). The
    informers watch `namespaces` (none: all), as Kopf is told to. Without `secret_watch`
    no Secret is listed or watched: each pass GETs the Secrets it reads (docs/operator.md,
    "Permissions": the chart's `rbac.secretWatch`).

    The handlers rely on one mend to Kopf's internals, installed here (idempotent; it refuses
    any Kopf but the pinned one) so that every operator built from them runs the same Kopf:
    its startup wait for its index made linear (index_readiness.py)."""
    index_readiness.install()

    @kopf.index(GROUP, VERSION, PLURAL, id="consumer_groups", registry=registry)
    def consumer_groups(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
        return {(namespace or "default", name): indexed(body)}

    def passes(memo: Any, kwargs: dict[str, Any]) -> Passes:
        """The current `Operator`'s pass runner, with Kopf's index attached to it (Kopf
        copies the memo per object, so what all handlers share lives in the Operator)."""
        op = _operator(memo)
        if op.observed.groups is None:
            op.observed.attach(kwargs["consumer_groups"])
        if op.passes is None:
            op.passes = start_passes(op, interval, resync)
        return op.passes

    @kopf.on.startup(registry=registry)
    async def start_informers(memo: Any, **_: Any) -> None:
        """Member pods and Opaque Secrets, listed and watched by the operator itself: they
        wait for Kopf's login (the vault), and passes wait for their first listing."""
        observed = _operator(memo).observed

        def kube() -> KubeApi:
            return _operator(memo).kube

        def pod_event(kind: str, pod: dict[str, Any]) -> None:
            runner = _operator(memo).passes
            group = ((pod.get("metadata") or {}).get("labels") or {}).get(GROUP_LABEL)
            if runner is not None and group is not None:
                runner.request(str((pod.get("metadata") or {}).get("namespace")), str(group))

        def secret_event(kind: str, secret: dict[str, Any]) -> None:
            """A token Secret created, rotated or deleted: its groups re-register the token."""
            op = _operator(memo)
            metadata = secret.get("metadata") or {}
            users = op.memories.users_of_secret(
                str(metadata.get("namespace")), str(metadata.get("name"))
            )
            if op.passes is not None:
                for group in users:
                    op.passes.request(*group)

        observed.inform(
            Informer(kube, MEMBER_PODS, tuple(namespaces), pod_event),
            Informer(kube, OPAQUE_SECRETS, tuple(namespaces), secret_event)
            if secret_watch
            else None,
        )
        for informer in (observed.pods, observed.secrets):
            if informer is not None:
                informer.start()

    @kopf.on.cleanup(registry=registry)
    async def stop_informers(memo: Any, **_: Any) -> None:
        observed = _operator(memo).observed
        for informer in (observed.pods, observed.secrets):
            if informer is not None:
                await informer.stop()

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def group_changed(namespace: str | None, name: str, memo: Any, **kwargs: Any) -> None:
        """Any change to the group (its status writes too: the pass after one finds
        nothing to do and asks for nothing)."""
        runner = passes(memo, kwargs)
        if kwargs.get("type") == "DELETED":
            runner.forget(namespace or "default", name)
        else:
            runner.request(namespace or "default", name)

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry)
    async def delete_group(
        namespace: str | None, name: str, body: kopf.Body, memo: Any, **kwargs: Any
    ) -> None:
        """Finalizer: pods gone, members left in one batch, coordinator state dropped."""
        passes(memo, kwargs)
        try:
            await finalize(_operator(memo), namespace or "default", name, body)
        except RetryLater as error:
            raise kopf.TemporaryError(str(error), delay=1) from error

    if webhook:

        @kopf.on.mutate(
            "pods",
            id=WEBHOOK_ID,
            operations={"CREATE"},
            labels={GROUP_LABEL: kopf.PRESENT},
            registry=registry,
        )
        async def stamp(
            body: kopf.Body, patch: kopf.Patch, memo: Any, namespace: str | None, **kwargs: Any
        ) -> None:
            passes(memo, kwargs)
            await stamp_member_pod(body=body, patch=patch, memo=memo, namespace=namespace)


WEBHOOK_ID = "staticfleet-mutate-pod"


def start_passes(op: Operator, interval: float, resync: float = DEFAULT_RESYNC_SECONDS) -> Passes:
    """The operator's pass runner; its coordinator's journal requests passes too (a member
    joined, left, a rebalance ended: nothing the API server would tell), and the resync
    asks for every indexed group once per `resync` seconds."""
    runner = Passes(lambda ns, name: reconcile_pass(op, ns, name), interval)
    runner.resync(op.observed.group_refs, resync)

    def journaled(event: JournalEvent) -> None:
        key = op.memories.ref_of(event.group_id)
        if key is not None and not runner.stopped:
            runner.request(*key)

    op.coordinator.add_journal_listener(journaled)
    return runner


async def stamp_member_pod(
    body: kopf.Body, patch: kopf.Patch, memo: Any, namespace: str | None, **_: Any
) -> None:
    """Adopted pods: a slot, its instance id and the member env, at admission."""
    pod_namespace = namespace or body.get("metadata", {}).get("namespace") or "default"
    mutation = await admit_pod(_operator(memo), pod_namespace, dict(body))
    if mutation is None:
        return
    patch.metadata["labels"] = mutation.labels
    patch.metadata["annotations"] = mutation.annotations
    patch.spec["containers"] = mutation.spec.get("containers", [])


def indexed(body: Mapping[str, Any]) -> dict[str, Any]:
    """What Kopf's index keeps of a ConsumerGroup: all of it but metadata.managedFields, its
    strings interned (every group repeats the spec's and status's keys and most values)."""
    kept: dict[str, Any] = interned(trimmed(body))
    return kept


def _operator(memo: Any) -> Operator:
    operator = memo["operator"]
    assert isinstance(operator, Operator)
    return operator
