"""The Kopf handlers. Thin: read the event, call the glue in `reconcile`/`webhook`, return.

Registered into a given registry (not Kopf's global one), so a test or a second operator in
one process gets its own set. The shared `Operator` arrives through Kopf's `memo`.
"""

from __future__ import annotations

from typing import Any

import kopf

from staticfleet_operator.crd import GROUP, PLURAL, VERSION
from staticfleet_operator.members import GROUP_LABEL
from staticfleet_operator.reconcile import Operator, RetryLater, finalize, reconcile
from staticfleet_operator.webhook import admit_pod

DEFAULT_INTERVAL_SECONDS = 2.0


def register(
    registry: kopf.OperatorRegistry,
    *,
    interval: float = DEFAULT_INTERVAL_SECONDS,
    webhook: bool = True,
) -> None:
    """Add the operator's handlers to `registry`. Without `webhook` the mutating handler is
    left out (Kopf refuses admission handlers when no webhook server is configured)."""

    @kopf.timer(group=GROUP, version=VERSION, plural=PLURAL, interval=interval, registry=registry)
    async def reconcile_group(namespace: str | None, name: str, memo: Any, **_: Any) -> None:
        """Observe pods and the coordinator, take the next step, write status."""
        await reconcile(_operator(memo), namespace or "default", name)

    @kopf.on.delete(group=GROUP, version=VERSION, plural=PLURAL, registry=registry)
    async def delete_group(
        namespace: str | None, name: str, body: kopf.Body, memo: Any, **_: Any
    ) -> None:
        """Finalizer: pods gone, members left in one batch, coordinator state dropped."""
        try:
            await finalize(_operator(memo), namespace or "default", name, body)
        except RetryLater as error:
            raise kopf.TemporaryError(str(error), delay=1) from error

    if webhook:
        kopf.on.mutate(
            "pods",
            id=WEBHOOK_ID,
            operations={"CREATE"},
            labels={GROUP_LABEL: kopf.PRESENT},
            registry=registry,
        )(stamp_member_pod)


WEBHOOK_ID = "staticfleet-mutate-pod"


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


def _operator(memo: Any) -> Operator:
    operator = memo["operator"]
    assert isinstance(operator, Operator)
    return operator
