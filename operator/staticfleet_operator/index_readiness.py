"""Kopf's wait for its in-memory indices, made linear in the number of watched objects.

At startup Kopf holds every object's handlers back until all objects of every indexed kind
have been indexed once: each object's worker drops its own toggle from one shared
`ToggleSet` and then waits on that set's `asyncio.Condition` for "all dropped". Every drop
notifies *all* waiting workers, and each of them wakes, takes the condition's lock, checks
and sleeps again: with N objects streaming in (pods, token Secrets, ConsumerGroups) that is
about N²/2 wake-ups on the one event loop. At 1,000 groups (about 8,000 objects) the
operator was not ready 420 s after a restart (docs/performance.md, "Operator at scale").

`install()` wraps `ToggleSet.wait_for` so that everyone waiting for the same state of the
same set awaits one shared waiter: a drop then wakes one task, not N, and the total work is
linear. The result is the same — every caller returns once the set reached the state —
and a caller's cancellation leaves the shared waiter to the others. This is a patch of a
private Kopf module (no setting or public hook reaches it), written for kopf 1.45.2, the
version pyproject.toml pins: `install()` refuses any other at start (`require_pinned_kopf`),
and the unit test tests/operator/test_index_readiness.py fails if the behaviour changes. The
fix belongs upstream (docs/operator.md, "Kopf: what the operator relies on").
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Final

import kopf
from kopf._cogs.aiokits.aiotoggles import ToggleSet

# The Kopf release this patch was written (and its private names checked) for.
PINNED_KOPF = "1.45.2"

_ORIGINAL: Final[Callable[[ToggleSet, bool], Awaitable[None]]] = ToggleSet.wait_for
# One shared waiter per (set, state); weak, so a set's waiters go with the set.
_SHARED: weakref.WeakKeyDictionary[ToggleSet, dict[bool, asyncio.Future[None]]] = (
    weakref.WeakKeyDictionary()
)
# How many callers await each shared waiter: the last one to leave cancels it.
_CALLERS: weakref.WeakKeyDictionary[asyncio.Future[None], int] = weakref.WeakKeyDictionary()


async def _shared_wait_for(self: ToggleSet, state: bool, /) -> None:
    wanted = bool(state)
    if self.is_on() == wanted:
        return
    waiters = _SHARED.setdefault(self, {})
    waiter = waiters.get(wanted)
    if waiter is None or waiter.done() or waiter.get_loop() is not asyncio.get_running_loop():
        waiter = asyncio.ensure_future(_ORIGINAL(self, wanted))
        waiters[wanted] = waiter
        _CALLERS[waiter] = 0
    _CALLERS[waiter] += 1
    try:
        await asyncio.shield(waiter)
    finally:
        _CALLERS[waiter] -= 1
        if _CALLERS[waiter] == 0 and not waiter.done():
            # Every caller is gone (cancelled: Kopf stopping): a waiter left behind is a
            # task Kopf's shutdown waits 5 s for before it cancels it ("hung tasks").
            waiter.cancel()


def require_pinned_kopf(found: str | None = None) -> None:
    """Raise unless the installed Kopf is the one the patch was written for: another
    release may have moved or changed the private code it replaces, silently."""
    version = found if found is not None else str(getattr(kopf, "__version__", "unknown"))
    if version != PINNED_KOPF:
        raise RuntimeError(
            f"staticfleet's Kopf patches were written for kopf {PINNED_KOPF}; found {version}: "
            f"install kopf=={PINNED_KOPF}, or check the patch in "
            "staticfleet_operator/index_readiness.py against the new release and move the pin"
        )


def install() -> None:
    """Idempotent: handlers.register calls it, before Kopf starts. Refuses (RuntimeError)
    any Kopf but the pinned one."""
    require_pinned_kopf()
    ToggleSet.wait_for = _shared_wait_for  # type: ignore[method-assign,assignment]


def installed() -> bool:
    return ToggleSet.wait_for is _shared_wait_for
