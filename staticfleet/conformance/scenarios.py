"""Group-protocol sequences, each sent the same way to both coordinators.

A scenario drives a `Session` (logical members, raw requests) and every request it sends is
a recorded step. Scenarios wait a little (`SETTLE_S`) where the order in which two requests
reach the coordinator matters, so both coordinators see the same order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from staticfleet.conformance.session import Session

SETTLE_S = 0.5
TOPIC_PARTITIONS = 4

Scenario = Callable[[Session], Awaitable[None]]


async def form_group(
    s: Session,
    members: Sequence[tuple[str, str | None]],
    protocols: dict[str, Sequence[str]] | None = None,
    *,
    label: str = "form",
) -> str:
    """Members join one after another (each newcomer makes the others rejoin), then sync;
    returns the leader's name. Dynamic members go through KIP-394 first."""
    protocols = protocols or {}
    joined: list[str] = []
    leader = ""
    for name, instance_id in members:
        offered = protocols.get(name, ("range",))
        if instance_id is None:
            await s.join(f"{label}: {name} joins without a member id", name, protocols=offered)
        newcomer = s.start_join(name, instance_id=instance_id, protocols=offered)
        await asyncio.sleep(SETTLE_S)
        rejoins = {
            other: s.start_join(other, protocols=protocols.get(other, ("range",)))
            for other in joined
        }
        for other, task in rejoins.items():
            response = await s.finish_join(f"{label}: {other} rejoins for {name}", other, task)
            if response is not None and response.leader == response.member_id:
                leader = other
        response = await s.finish_join(f"{label}: {name} joins", name, newcomer)
        if response is not None and response.leader == response.member_id:
            leader = name
        joined.append(name)
        await sync_all(s, joined, leader, label=f"{label}: after {name}")
    return leader


async def sync_all(s: Session, names: Sequence[str], leader: str, *, label: str) -> None:
    followers = {name: await s.sync("", name, background=True) for name in names if name != leader}
    await asyncio.sleep(SETTLE_S / 3)
    await s.sync(
        f"{label}: leader {leader} syncs",
        leader,
        {name: f"assignment-of-{name}".encode() for name in names},
    )
    for name, task in followers.items():
        await s.finish_sync(f"{label}: {name} syncs", task)


# ---------------------------------------------------------------------- scenarios


async def static_join_and_rejoin(s: Session) -> None:
    await s.join("a joins", "a", instance_id="ia")
    await s.sync("a syncs as leader", "a", {"a": b"A0"})
    await s.heartbeat("a heartbeats", "a")
    old = s.members["a"].member_id
    await s.join("a restarts: same instance id, no member id", "a", member_id="")
    await s.heartbeat("the replaced member id heartbeats", "a", member_id=old)
    await s.sync("the restarted leader syncs with nothing", "a", {})
    await s.heartbeat("the restarted member heartbeats", "a")
    await s.join("join with the replaced member id", "a", member_id=old)
    await s.describe("describe")


async def lone_static_member_changes_protocol(s: Session) -> None:
    await s.join("a joins", "a", instance_id="ia")
    await s.sync("a syncs", "a", {"a": b"A0"})
    await s.join(
        "a restarts preferring another protocol",
        "a",
        member_id="",
        protocols=("roundrobin", "range"),
    )
    await s.sync("a syncs again", "a", {"a": b"A1"})
    await s.describe("describe")
    await s.join("b joins with an empty instance id", "b", instance_id="", protocols=("range",))


async def static_fencing(s: Session) -> None:
    await form_group(s, [("a", "ia"), ("b", "ib")])
    old = s.members["a"].member_id
    await s.join("a restarts with its instance id", "a", member_id="")
    await s.heartbeat("zombie heartbeat", "a", member_id=old)
    await s.commit("zombie commit", "a", {0: 10}, member_id=old)
    await s.leave("zombie leaves", [(old, "ia")])
    await s.heartbeat("b heartbeats", "b")
    await s.heartbeat("a heartbeats with b's instance id", "a", instance_id="ib")
    await s.commit("the restarted a commits", "a", {0: 11})
    await s.describe("describe")


async def kip394_member_id_required(s: Session) -> None:
    await s.join("d joins without a member id", "d")
    await s.heartbeat("the pending member heartbeats", "d")
    await s.join("d joins with the given id", "d")
    await s.sync("d syncs", "d", {"d": b"D"})
    await s.join("e joins without a member id", "e")
    await s.describe("the pending member is not a member")
    await s.leave("the pending member leaves", [(s.members["e"].member_id, None)])
    await s.heartbeat("d heartbeats after the pending member left", "d")
    await s.describe("describe")


async def protocol_votes(s: Session) -> None:
    await form_group(
        s,
        [("a", "ia"), ("b", "ib"), ("c", "ic")],
        {"a": ("range", "roundrobin"), "b": ("roundrobin", "range"), "c": ("roundrobin", "range")},
    )
    await s.describe("the majority's first choice is selected")


async def compatible_phase(s: Session) -> None:
    await form_group(s, [("a", "ia"), ("b", "ib")])
    both = ("cooperative-sticky", "range")
    await s.join("a restarts offering cooperative first", "a", member_id="", protocols=both)
    await s.sync("a syncs", "a", {})
    await s.describe("still range: b does not offer cooperative")
    restarted_b = s.start_join("b", member_id="", protocols=both)
    await asyncio.sleep(SETTLE_S)
    await s.heartbeat("a heartbeats while b's restart changes the vote", "a")
    a_rejoins = s.start_join("a", protocols=both)
    await s.finish_join("a rejoins", "a", a_rejoins)
    await s.finish_join("b's restart completes", "b", restarted_b)
    await s.describe("cooperative selected")


async def inconsistent_group_protocol(s: Session) -> None:
    await form_group(s, [("a", "ia")])
    await s.join(
        "x offers only cooperative", "x", instance_id="ix", protocols=("cooperative-sticky",)
    )
    await s.join("y offers another protocol type", "y", instance_id="iy", protocol_type="connect")
    await s.join("z offers no protocol", "z", instance_id="iz", protocols=())
    await s.join(
        "an unknown member id offering nothing in common",
        "w",
        member_id="unknown-member",
        protocols=("cooperative-sticky",),
    )
    await s.describe("describe")


async def batch_leave_mixed(s: Session) -> None:
    await form_group(s, [("a", "ia"), ("b", "ib"), ("c", None)])
    await s.leave("an empty leave", [])
    await s.leave(
        "one batch, mixed results",
        [
            ("", "ia"),
            ("not-b", "ib"),
            ("unknown-member", None),
            (s.members["c"].member_id, None),
            ("", "unknown-instance"),
        ],
    )
    await s.describe("after the batch")
    await s.heartbeat("b heartbeats", "b")
    await s.join("b rejoins", "b")
    await s.sync("b syncs", "b", {"b": b"B"})
    await s.describe("describe")


async def heartbeat_per_state(s: Session) -> None:
    s.member("ghost")
    await s.heartbeat(
        "heartbeat to a group that does not exist", "ghost", generation=1, member_id="ghost-member"
    )
    await form_group(s, [("a", "ia")])
    generation = s.members["a"].generation
    await s.heartbeat("Stable: right generation", "a")
    await s.heartbeat("Stable: wrong generation", "a", generation=generation + 5)
    await s.heartbeat("Stable: unknown member", "a", member_id="unknown-member", instance_id=None)
    await s.heartbeat("Stable: another instance id", "a", instance_id="other")
    newcomer = s.start_join("b", instance_id="ib")
    await asyncio.sleep(SETTLE_S)
    await s.heartbeat("PreparingRebalance: right generation", "a")
    await s.heartbeat("PreparingRebalance: wrong generation", "a", generation=generation + 5)
    await s.describe("PreparingRebalance")
    await s.join("a rejoins", "a")
    await s.finish_join("b joins", "b", newcomer)
    await s.heartbeat("CompletingRebalance: new generation", "a")
    await s.heartbeat("CompletingRebalance: old generation", "a", generation=generation)
    await s.describe("CompletingRebalance")
    await sync_all(s, ["a", "b"], "a", label="sync")
    await s.heartbeat("Stable again", "b")


async def offset_commit_and_fetch(s: Session) -> None:
    s.member("admin")
    await s.commit("a commit without a member to an unknown group", None, {0: 5, 1: 6})
    await s.fetch("fetch all", None, None)
    await s.fetch("fetch one committed and one not", None, [1, 2])
    await form_group(s, [("a", "ia")])
    generation = s.members["a"].generation
    await s.commit("the member commits", "a", {0: 7})
    await s.commit("wrong generation", "a", {0: 8}, generation=generation + 5)
    await s.commit("unknown member", "a", {0: 8}, member_id="unknown-member")
    await s.commit("a partition the topic does not have", "a", {99: 1})
    await s.fetch("the member fetches", "a", [0, 1])
    await s.fetch("a fetch naming a stale generation", "a", [0], generation=generation + 5)
    newcomer = s.start_join("b", instance_id="ib")
    await asyncio.sleep(SETTLE_S)
    await s.commit("PreparingRebalance: the member commits", "a", {0: 9})
    await s.join("a rejoins", "a")
    await s.finish_join("b joins", "b", newcomer)
    await s.commit("CompletingRebalance: the new generation", "a", {0: 10})
    await s.commit("CompletingRebalance: the old generation", "a", {0: 10}, generation=generation)
    await s.commit("CompletingRebalance: unknown member", "a", {0: 10}, member_id="unknown-member")
    await sync_all(s, ["a", "b"], "a", label="sync")
    await s.commit(
        "a generation to a group that does not exist",
        None,
        {0: 1},
        generation=3,
        member_id="someone",
        group_id=s.group_id + "-missing",
    )
    await s.fetch("fetch all at the end", None, None)
    await s.commit("a commit to the empty group id", None, {0: 1}, group_id="")
    await s.fetch("a fetch from the empty group id", None, [0], group_id="")


async def static_session_expiry(s: Session) -> None:
    await s.join("a joins with a 1 s session", "a", instance_id="ia", session_timeout_ms=1_000)
    await s.sync("a syncs", "a", {"a": b"A"})
    newcomer = s.start_join("b", instance_id="ib")
    await asyncio.sleep(SETTLE_S)
    await s.join("a rejoins", "a", session_timeout_ms=1_000)
    await s.finish_join("b joins", "b", newcomer)
    await sync_all(s, ["a", "b"], "a", label="sync")
    await s.keep_alive("b", 3.0)  # a is silent for three of its session timeouts
    await s.heartbeat("b heartbeats after a's session expired", "b")
    await s.describe("a is gone")
    await s.heartbeat("a heartbeats after its session expired", "a")
    await s.join("b rejoins", "b")
    await s.describe("b alone")


async def empty_group(s: Session) -> None:
    await form_group(s, [("a", None)])
    await s.leave("a leaves", [(s.members["a"].member_id, None)])
    await s.describe("the group is empty")
    await s.heartbeat("the member that left heartbeats", "a")
    await s.commit("a commit without a member to the empty group", None, {0: 3})
    await s.fetch("fetch all", None, None)


SCENARIOS: dict[str, Scenario] = {
    "static_join_and_rejoin": static_join_and_rejoin,
    "lone_static_member_changes_protocol": lone_static_member_changes_protocol,
    "static_fencing": static_fencing,
    "kip394_member_id_required": kip394_member_id_required,
    "protocol_votes": protocol_votes,
    "compatible_phase": compatible_phase,
    "inconsistent_group_protocol": inconsistent_group_protocol,
    "batch_leave_mixed": batch_leave_mixed,
    "heartbeat_per_state": heartbeat_per_state,
    "offset_commit_and_fetch": offset_commit_and_fetch,
    "static_session_expiry": static_session_expiry,
    "empty_group": empty_group,
}
