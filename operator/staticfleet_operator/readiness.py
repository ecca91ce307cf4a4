"""Readiness after a restart: not before every group's member token is registered again.

The embedded server starts with no member tokens; each ConsumerGroup's token is registered
by the group's reconcile pass (tokens.py). A replica that reported ready before those
passes would let members in only to answer them 403. `TokensGate` is a readiness gate of
the coordinator server (`add_readiness_gate`): closed until the groups that existed when
the process started (listed once, `expect_groups`) have each had their token reconciled
once — registered, or found unusable (a group whose Secret is missing must not hold every
other group's members back).

Not every group waits for its pass: the listing hands the groups to `on_listed`, which
registers at once each token its Secret already holds (`reconcile.register_listed_tokens`,
no write: what needs one, a missing Secret or a refused token, is the pass's). At a restart
that is nearly every group, so readiness costs a listing, not a pass per group: at 1,000
groups, 2.1 s instead of 13.4 s (docs/performance.md, "Restart → ready").

Bounded: a listed group that is never reconciled (deleted in between, say) would keep the
gate closed for ever, so once passes have started (the replica is active) the gate opens
anyway after `max_wait_s`, with a warning naming the groups still waiting. A paused peering
replica runs no passes; its own `PeeringGate` keeps it unready regardless.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.kube import KubeApi, KubeError

log = logging.getLogger("staticfleet.operator.readiness")

DEFAULT_MAX_WAIT_SECONDS = 60.0
# The ConsumerGroups listed at start, each with its key.
Listed = Sequence[tuple[GroupRef, Mapping[str, Any]]]
LIST_RETRY_SECONDS = 2.0


@dataclass(slots=True)
class TokensGate:
    """A readiness gate: open once every expected group's token was reconciled once."""

    max_wait_s: float = DEFAULT_MAX_WAIT_SECONDS
    clock: Callable[[], float] = time.monotonic
    # None until the groups were listed; then the keys ("ns/name") still to reconcile.
    pending: set[GroupRef] | None = None
    reconciled_keys: set[GroupRef] = field(default_factory=set)
    # When the first pass ran (the replica is active): the bound starts then.
    first_pass_at: float | None = None
    gave_up: bool = False

    def expect(self, keys: Iterable[GroupRef]) -> None:
        self.pending = set(keys) - self.reconciled_keys
        log.info("ready once the member tokens of %d group(s) are registered", len(self.pending))

    def pass_started(self) -> None:
        """A pass began (the replica is active): the bound runs from the first, even if every
        pass fails before its token step (each would else keep the gate closed for ever)."""
        if self.first_pass_at is None:
            self.first_pass_at = self.clock()

    def reconciled(self, key: GroupRef) -> None:
        self.pass_started()
        self.registered(key)

    def registered(self, key: GroupRef) -> None:
        """The group's token is registered, by its pass or from the listing. Only a pass
        starts the bound: a standby replica registers listed tokens too, runs no pass, and
        must not give up on the rest before it is active."""
        self.reconciled_keys.add(key)
        if self.pending is not None:
            self.pending.discard(key)

    def __call__(self) -> bool:
        if self.pending is None:
            return False
        if not self.pending:
            return True
        if self.first_pass_at is not None and self.clock() - self.first_pass_at >= self.max_wait_s:
            if not self.gave_up:
                self.gave_up = True
                log.warning(
                    "ready without the member tokens of %s: not reconciled within %.0f s",
                    ", ".join(str(ref) for ref in sorted(self.pending)),
                    self.max_wait_s,
                )
            return True
        return False


async def expect_groups(
    kube: Callable[[], KubeApi],
    gate: TokensGate,
    namespaces: Sequence[str],
    *,
    on_listed: Callable[[Listed], Awaitable[None]] | None = None,
    retry_s: float = LIST_RETRY_SECONDS,
) -> None:
    """List the ConsumerGroups once (retrying until the API answers), hand them to the gate
    (until then it stays closed), then to `on_listed`."""
    while True:
        try:
            bodies = await kube().list_groups(namespaces)
        except (KubeError, aiohttp.ClientError, TimeoutError) as error:
            log.warning("cannot list ConsumerGroups (readiness waits): %s", error)
            await asyncio.sleep(retry_s)
            continue
        listed = [(GroupRef.of(body), body) for body in bodies]
        gate.expect(ref for ref, _ in listed)
        if on_listed is not None:
            await on_listed(listed)
        return
