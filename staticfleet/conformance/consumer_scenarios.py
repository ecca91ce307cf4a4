"""Consumer-protocol (KIP-848) sequences, each step's answer pinned to what the operator relies on.

Our coordinator speaks the classic protocol only, so these run against the broker alone
(`runner.run_consumer_protocol`): a pinned answer that changes (a new Kafka) fails the
conformance test and names the step. The logical members acknowledge a new assignment at
their next heartbeat, sent at once, so nothing waits for the broker's heartbeat interval or
session timeout (45 s by default on the test broker, not lowered). What does take time: the
broker computes a group's target assignment at most once per
`group.consumer.assignment.interval.ms` (1 s by default in Kafka 4.4, KIP-1263), so a new
member's partitions arrive up to a second after its join; `converge` polls for that.
Member epochs are pinned relative to the group's first (a fresh group's first member gets
epoch 2 from the 4.4 broker, not 1: which number is the broker's business).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from staticfleet.conformance.consumer_session import ConsumerSession
from staticfleet.conformance.scenarios import TOPIC_PARTITIONS
from staticfleet.conformance.session import Matches, Record

ConsumerScenario = Callable[[ConsumerSession], Awaitable[None]]

EVERY = list(range(TOPIC_PARTITIONS))
HALF = TOPIC_PARTITIONS // 2
# A group converges within a few assignment intervals (1 s each by default).
CONVERGE_LIMIT_S = 15.0
POLL_S = 0.1


def some_of(partitions: Sequence[int], count: int) -> Matches:
    pool = set(partitions)
    return Matches(
        f"{count} of {sorted(pool)}",
        lambda got: isinstance(got, list) and len(got) == count and set(got) <= pool,
    )


def at_least(value: int) -> Matches:
    return Matches(f">= {value}", lambda got: isinstance(got, int) and got >= value)


def below(value: int) -> Matches:
    return Matches(f"< {value}", lambda got: isinstance(got, int) and got < value)


def without(partitions: Sequence[int]) -> list[int]:
    return [p for p in EVERY if p not in partitions]


at_least_one = Matches("a partition or more", lambda got: isinstance(got, list) and len(got) >= 1)


def holding(record: Record, name: str) -> list[int]:
    """What a described group lists `name` as holding (nothing: not listed, or no answer;
    the pins that follow then fail, naming their step)."""
    return next((list(m[4]) for m in record.get("members", []) if m[0] == name), [])


def group_epoch(record: Record) -> int:
    """A described group's epoch (-1: no answer; the pins that follow then fail)."""
    epoch = record.get("group_epoch")
    return epoch if isinstance(epoch, int) else -1


async def converge(s: ConsumerSession, names: Sequence[str], *, label: str) -> Record:
    """Each of `names` heartbeats (acknowledging what it was given) until the group is
    converged; the described group, recorded as one step with the time it took."""
    started = time.perf_counter()
    while True:
        for name in names:
            await s.consumer_heartbeat(label, name, recorded=False)
        described = await s.consumer_describe(label, recorded=False)
        if described.get("converged") or time.perf_counter() - started > CONVERGE_LIMIT_S:
            break
        await asyncio.sleep(POLL_S)
    s.record(label, described)
    s.measure(converged_after_ms=(time.perf_counter() - started) * 1000)
    s.pin(error="NONE", state="Stable", converged=True)
    return described


async def join_first(s: ConsumerSession, name: str, instance_id: str) -> int:
    """The group's first member joins with epoch 0: an epoch >= 1 and every partition at
    once (nobody else owns any). Its epoch, the base the scenario's epochs are pinned to."""
    answer = await s.consumer_heartbeat(
        f"{name} joins with epoch 0", name, instance_id=instance_id, epoch=0
    )
    s.pin(error="NONE", member=name, member_epoch=at_least(1), assignment=EVERY)
    epoch = answer.get("member_epoch")
    return epoch if isinstance(epoch, int) else 0


async def two_members(s: ConsumerSession) -> Record:
    """a, then b, static: a takes every partition, then gives half to b; the converged group."""
    await join_first(s, "a", "ia")
    await s.consumer_heartbeat("b joins", "b", instance_id="ib", epoch=0)
    # Nothing yet: a owns every partition until it has revoked some.
    s.pin(error="NONE", member="b", assignment=[])
    described = await converge(s, ["a", "b"], label="a gives half to b")
    kept = holding(described, "a")
    epoch = group_epoch(described)
    s.pin(
        assignment_epoch=epoch,
        members=[
            ("a", "ia", epoch, "consumer", some_of(EVERY, HALF)),
            ("b", "ib", epoch, "consumer", without(kept)),
        ],
    )
    return described


# ---------------------------------------------------------------------- scenarios


async def consumer_join(s: ConsumerSession) -> None:
    epoch = await join_first(s, "a", "ia")
    await s.consumer_heartbeat("a acknowledges", "a")
    s.pin(error="NONE", member_epoch=epoch, assignment=None)
    await s.consumer_describe("describe")
    s.pin(
        error="NONE",
        state="Stable",
        group_epoch=epoch,
        assignment_epoch=epoch,
        converged=True,
        members=[("a", "ia", epoch, "consumer", EVERY)],
    )
    await s.list_type("listed")
    s.pin(type="consumer", listed_as_consumer=True)


async def consumer_static_restart(s: ConsumerSession) -> None:
    described = await two_members(s)
    epoch = group_epoch(described)
    kept, others = holding(described, "a"), holding(described, "b")
    await s.consumer_leave("a closes: epoch -2", "a", static=True)
    s.pin(error="NONE", member="a", member_epoch=-2)
    await s.consumer_describe("a away: kept at epoch -2 with its partitions")
    s.pin(
        group_epoch=epoch,
        converged=False,
        members=[("a", "ia", -2, "consumer", kept), ("b", "ib", epoch, "consumer", others)],
    )
    await s.consumer_heartbeat("b heartbeats while a is away", "b")
    s.pin(error="NONE", member_epoch=epoch, assignment=None)
    old = s.consumers["a"].member_id
    await s.consumer_heartbeat(
        "a restarted: a new member id, its instance id", "a2", instance_id="ia", epoch=0
    )
    # Its partitions again at the group epoch: no new epoch, nothing moved.
    s.pin(error="NONE", member="a2", member_epoch=epoch, assignment=kept)
    await s.consumer_heartbeat("b heartbeats after the restart", "b")
    s.pin(error="NONE", member_epoch=epoch, assignment=None)
    await s.consumer_describe("a back, nobody moved")
    s.pin(
        group_epoch=epoch,
        converged=True,
        members=[("a2", "ia", epoch, "consumer", kept), ("b", "ib", epoch, "consumer", others)],
    )
    # Its instance id is the new member's now: the old process is fenced by it.
    await s.consumer_heartbeat("the replaced member id heartbeats", "a", epoch=epoch, member_id=old)
    s.pin(error="FENCED_INSTANCE_ID")


async def consumer_fencing(s: ConsumerSession) -> None:
    described = await two_members(s)
    epoch = group_epoch(described)
    await s.consumer_heartbeat("a heartbeats with an epoch from the future", "a", epoch=epoch + 1)
    s.pin(error="FENCED_MEMBER_EPOCH")
    await s.consumer_heartbeat(
        "a heartbeats with a stale epoch, owning every partition",
        "a",
        epoch=epoch - 1,
        owned=tuple(EVERY),
    )
    s.pin(error="FENCED_MEMBER_EPOCH")
    await s.consumer_heartbeat("an unknown member id with epoch 1", "ghost", epoch=1)
    s.pin(error="UNKNOWN_MEMBER_ID")
    # A refused heartbeat changes nothing: a is still the member it was.
    await s.consumer_heartbeat("a heartbeats at its epoch", "a")
    s.pin(error="NONE", member_epoch=epoch, assignment=None)
    await s.consumer_describe("nothing changed")
    s.pin(group_epoch=epoch, converged=True, members=described["members"])


async def consumer_unreleased_instance_id(s: ConsumerSession) -> None:
    epoch = await join_first(s, "a", "ia")
    await s.consumer_heartbeat(
        "a second process joins with ia still held", "a2", instance_id="ia", epoch=0
    )
    s.pin(error="UNRELEASED_INSTANCE_ID")
    await s.consumer_describe("the refused join changed nothing")
    s.pin(group_epoch=epoch, converged=True, members=[("a", "ia", epoch, "consumer", EVERY)])
    await s.consumer_heartbeat("a heartbeats", "a")
    s.pin(error="NONE", member_epoch=epoch)


async def consumer_leave_by_instance_ids(s: ConsumerSession) -> None:
    await two_members(s)
    await s.consumer_heartbeat("c joins", "c", instance_id="ic", epoch=0)
    s.pin(error="NONE", assignment=[])
    three = await converge(s, ["a", "b", "c"], label="three members")
    epoch = group_epoch(three)
    kept = holding(three, "a")
    s.pin(members=[(n, f"i{n}", epoch, "consumer", at_least_one) for n in "abc"])
    await s.consumer_leave("c's pod is gone: epoch -2", "c", static=True)
    s.pin(error="NONE", member_epoch=-2)
    started = time.perf_counter()
    await s.leave(
        "one LeaveGroup: ib, ic (away), an unknown instance, ia with another member id",
        [("", "ib"), ("", "ic"), ("", "unknown-instance"), ("not-a", "ia")],
    )
    s.measure(round_trip_ms=(time.perf_counter() - started) * 1000)
    s.pin(
        error="NONE",
        members=[
            ("", "ib", "NONE"),
            ("", "ic", "NONE"),
            ("", "unknown-instance", "UNKNOWN_MEMBER_ID"),
            ("?1", "ia", "FENCED_INSTANCE_ID"),
        ],
    )
    await s.consumer_describe("b and c gone at once: one new group epoch")
    s.pin(group_epoch=epoch + 1, members=[("a", "ia", epoch, "consumer", kept)])
    await converge(s, ["a"], label="a takes every partition")
    s.pin(group_epoch=epoch + 1, members=[("a", "ia", epoch + 1, "consumer", EVERY)])
    await s.leave(
        "LeaveGroup of a consumer member by its member id alone",
        [(s.consumers["a"].member_id, None)],
    )
    s.pin(error="NONE", members=[("a", None, "NONE")])
    await s.consumer_describe("the group is empty")
    s.pin(error="NONE", state="Empty", members=[])


async def consumer_migration(s: ConsumerSession) -> None:
    """KIP-848's online upgrade: a stable classic group becomes a consumer group when its
    first consumer-protocol member joins; the classic member stays, as a classic member."""
    await s.join("k joins on the classic protocol", "k", instance_id="ik")
    s.pin(error="NONE", member="k", leader="k")
    await s.sync("k syncs as leader", "k", {"k": s.assignment(EVERY)})
    s.pin(error="NONE", assignment=EVERY)
    await s.list_type("a classic group")
    s.pin(type="classic", listed_as_consumer=False)
    # How the operator's backend tells the two types apart (with DescribeGroups' "Dead, no
    # members" for a consumer group, below).
    await s.consumer_describe("ConsumerGroupDescribe of the classic group")
    s.pin(error="GROUP_ID_NOT_FOUND", members=[])
    joined = await s.consumer_heartbeat(
        "c joins on the consumer protocol", "c", instance_id="ic", epoch=0
    )
    # Nothing yet: the classic member owns every partition until it rejoins.
    s.pin(error="NONE", member="c", member_epoch=at_least(1), assignment=[])
    epoch = int(joined.get("member_epoch") or 0)
    await s.list_type("converted")
    s.pin(type="consumer", listed_as_consumer=True)
    await s.consumer_describe("k is a classic member of the consumer group")
    s.pin(
        error="NONE",
        group_epoch=epoch,
        converged=False,
        members=[("c", "ic", epoch, "consumer", []), ("k", "ik", below(epoch), "classic", EVERY)],
    )
    await s.describe("DescribeGroups of the converted group")
    s.pin(error="NONE", state="Dead", members=[])
    await s.heartbeat("k heartbeats: a rebalance", "k")
    s.pin(error="REBALANCE_IN_PROGRESS")
    await s.join("k rejoins", "k")
    # The broker assigns: no leader, no member list to assign from.
    s.pin(error="NONE", member="k", generation="g+1", leader="", members=[])
    await s.sync("k syncs: the broker's assignment", "k", {})
    s.pin(error="NONE", assignment=some_of(EVERY, HALF))
    described = await converge(s, ["c"], label="c takes its half")
    s.pin(
        group_epoch=epoch,
        members=[
            ("c", "ic", epoch, "consumer", some_of(EVERY, HALF)),
            ("k", "ik", epoch, "classic", without(holding(described, "c"))),
        ],
    )
    await s.heartbeat("k heartbeats", "k")
    s.pin(error="NONE")


CONSUMER_SCENARIOS: dict[str, ConsumerScenario] = {
    "consumer_join": consumer_join,
    "consumer_static_restart": consumer_static_restart,
    "consumer_fencing": consumer_fencing,
    "consumer_unreleased_instance_id": consumer_unreleased_instance_id,
    "consumer_leave_by_instance_ids": consumer_leave_by_instance_ids,
    "consumer_migration": consumer_migration,
}
