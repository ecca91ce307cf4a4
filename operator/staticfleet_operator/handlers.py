"""The Kopf handlers. Thin: read the event, call the glue in `reconcile`/`webhook`, return.

Registered into a given registry (not Kopf's global one), so a test or a second operator in
one process gets its own set. The shared `Operator` arrives through Kopf's `memo`.

Watch, don't poll: three Kopf indices (ConsumerGroups, member pods by group, Opaque Secrets)
are what a pass and the webhook read (`observed.py`); a watch event on a group or on one of
its pods requests a pass for the group (`passes.py`), and so does its coordinator's journal;
a slow resync, spread over all groups, is the safety net. Kopf fills the indices before it calls any
handler, so the first passes already see every pod; when it lists pods or Secrets again
later (relists.py), one check finds what the listing left indexed although it is gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from coordinator import JournalEvent
from staticfleet_operator import index_readiness, relists
from staticfleet_operator.crd import GROUP, PLURAL, VERSION
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
) -> None:
    """Add the operator's handlers to `registry`. Without `webhook` the mutating handler is
    left out (Kopf refuses admission handlers when no webhook server is configured).

    The handlers rely on two mends to Kopf's internals, installed here (idempotent) so that
    every operator built from them runs the same Kopf: its startup wait for its indices made
    linear (index_readiness.py), and the end of each listing passed on (relists.py)."""
    index_readiness.install()
    relists.install()

    @kopf.index(GROUP, VERSION, PLURAL, id="consumer_groups", registry=registry)
    def consumer_groups(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
        return {(namespace or "default", name): indexed(body)}

    @kopf.index("pods", id="member_pods", labels={GROUP_LABEL: kopf.PRESENT}, registry=registry)
    def member_pods(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
        return {(namespace or "default", labels[GROUP_LABEL]): indexed(body)}

    # Token Secrets are named by the group (`<group>-member-token` or spec.tokenSecretRef),
    # so every Opaque Secret of the watched namespaces is indexed: its data only.
    @kopf.index("secrets", id="token_secrets", when=_opaque, registry=registry)
    def token_secrets(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
        kept = indexed({"metadata": body.get("metadata") or {}, "data": body.get("data") or {}})
        return {(namespace or "default", name): kept}

    def passes(memo: Any, kwargs: dict[str, Any]) -> Passes:
        """The current `Operator`'s pass runner, with Kopf's indices attached to it (Kopf
        copies the memo per object, so what all handlers share lives in the Operator)."""
        op = _operator(memo)
        if not op.observed.watching:
            op.observed.attach(
                kwargs["consumer_groups"], kwargs["member_pods"], kwargs["token_secrets"]
            )
        if op.passes is None:
            op.passes = start_passes(op, interval, resync)
        return op.passes

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def group_changed(namespace: str | None, name: str, memo: Any, **kwargs: Any) -> None:
        """Any change to the group (its status writes too: the pass after one finds
        nothing to do and asks for nothing)."""
        runner = passes(memo, kwargs)
        if kwargs.get("type") == "DELETED":
            runner.forget(namespace or "default", name)
        else:
            runner.request(namespace or "default", name)

    @kopf.on.event("pods", labels={GROUP_LABEL: kopf.PRESENT}, registry=registry)
    async def member_pod_changed(
        namespace: str | None, labels: kopf.Labels, memo: Any, **kwargs: Any
    ) -> None:
        passes(memo, kwargs).request(namespace or "default", labels[GROUP_LABEL])

    @kopf.on.event("secrets", when=_opaque, registry=registry)
    async def secret_changed(namespace: str | None, name: str, memo: Any, **kwargs: Any) -> None:
        """A token Secret created, rotated or deleted: its groups re-register the token."""
        runner = passes(memo, kwargs)
        for key in _operator(memo).secret_users.get((namespace or "default", name), ()):
            runner.request(*key)

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
    runner.resync(lambda: list(op.observed.groups or {}), resync)

    def journaled(event: JournalEvent) -> None:
        key = op.group_keys.get(event.group_id)
        if key is not None and not runner.stopped:
            runner.request(*key)

    op.coordinator.add_journal_listener(journaled)

    def listed(plural: str, namespace: str | None) -> bool:
        """Kopf listed a kind again (its watch could not resume): its index may keep
        objects that are gone (observed.py). Listings before the passes started are Kopf's
        first, into empty indices: nothing to check."""
        if plural == "pods":
            runner.relisted(plural, lambda: op.observed.stale_pods(op.kube))
        elif plural == "secrets":
            runner.relisted(plural, lambda: _stale_secret_users(op))
        return not runner.stopped

    relists.add_listener(listed)
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
    """What an index keeps of an object: all of it but metadata.managedFields (the API
    server's field-ownership bookkeeping, which nothing here reads). With thousands of pods
    that is a large share of the objects the garbage collector scans and of the RSS."""
    kept = dict(body)
    metadata = kept.get("metadata")
    if isinstance(metadata, Mapping) and "managedFields" in metadata:
        kept["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return kept


async def _stale_secret_users(op: Operator) -> set[tuple[str, str]]:
    """The groups whose token Secret a relist left indexed although it is gone."""
    gone = await op.observed.stale_secrets(op.kube)
    return {group for key in gone for group in op.secret_users.get(key, ())}


def _opaque(body: kopf.Body, **_: Any) -> bool:
    """Opaque Secrets (the API server's default type) hold member tokens; service account
    tokens, TLS pairs and registry credentials are never indexed."""
    return bool(body.get("type", "Opaque") == "Opaque")


def _operator(memo: Any) -> Operator:
    operator = memo["operator"]
    assert isinstance(operator, Operator)
    return operator
