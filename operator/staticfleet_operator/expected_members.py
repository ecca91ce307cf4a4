"""Expected members, for a scale-up in one rebalance: which instance ids the operator tells
the embedded coordinator to expect before it creates member pods (pure; `pass_plan.py`
decides with it, the actuator acts).

The coordinator holds a join phase until every expected member has joined or the expected
members' timeout passes (`coordinator.expected_members`), so new members that start seconds
apart still land in one generation. Kafka's coordinator has no such API: a Kafka-coordinated group
rebalances as its members arrive.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def instance_id(prefix: str, slot: int) -> str:
    return f"{prefix}-{slot}"


def expected_on_create(
    prefix: str, replicas: int, creating: Sequence[int], listed: Collection[str | None]
) -> list[str] | None:
    """The instance ids to expect before pods for the `creating` slots are made, or None
    when there is nothing to wait for: every slot being created is a member the coordinator
    still lists (a static member's pod restarting rejoins without a rebalance anyway).

    All of the group's slots are named, not only the new ones: the members already there
    rejoin during the held phase, so they count as joined and the set is simply the fleet."""
    if not any(instance_id(prefix, slot) not in listed for slot in creating):
        return None
    return [instance_id(prefix, slot) for slot in range(replicas)]


def should_clear(
    expected: Collection[str],
    prefix: str,
    replicas: int,
    listed: Collection[str | None],
    stable: bool,
    expired: bool = False,
) -> bool:
    """Clear expected members that no longer describe the fleet (a scale-down named slots
    at or above `replicas`), that are fulfilled (every expected member is listed in a
    Stable group; a member is listed as soon as it joins, before the held phase ends), or
    that are past their deadline: they hold no join phase any more, and kept they would go
    on listing members as missing that nobody waits for."""
    wanted = {instance_id(prefix, slot) for slot in range(replicas)}
    if expired or not set(expected) <= wanted:
        return True
    return stable and all(i in listed for i in expected)


# A pass at the expected members' expiry runs this much after it, so it sees it expired (the
# coordinator's clock and the event loop's are read at slightly different moments).
EXPIRY_MARGIN_SECONDS = 0.05


def seconds_until_expiry(deadline_ms: int, now_ms: int) -> float | None:
    """When the group's pass at its expected members' expiry is due (None: expired already).

    Pending expected members are a clock, not a reason to poll: members joining are journal
    events (each asks for a pass), so only the deadline needs a timer of its own."""
    if now_ms >= deadline_ms:
        return None
    return (deadline_ms - now_ms) / 1000 + EXPIRY_MARGIN_SECONDS
