"""JoinGroup / SyncGroup rules of Kafka's classic coordinator (docs/coordinator.md, "Rules")."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from coordinator import CoordinatorConfig, ErrorCode, JoinGroupResponse
from coordinator.clock import settle
from tests.coordinator.harness import (
    GROUP,
    INITIAL_DELAY_MS,
    REBALANCE_MS,
    SESSION_MS,
    Harness,
    join_request,
)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = await Harness().start()
    yield h
    await h.coordinator.close()


async def test_dynamic_member_gets_member_id_required_then_joins(harness: Harness) -> None:
    first = await harness.coordinator.join_group(join_request())
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id
    task = harness.join(join_request(first.member_id))
    await settle()
    assert not task.done(), "the first generation waits for the initial rebalance delay"
    await harness.clock.advance(INITIAL_DELAY_MS)
    response = await task
    assert response.error_code == ErrorCode.NONE
    assert response.member_id == first.member_id
    assert response.generation_id == 1
    assert response.leader == first.member_id
    assert response.protocol_name == "range"
    assert [m.member_id for m in response.members] == [first.member_id]


async def test_static_member_never_gets_member_id_required(harness: Harness) -> None:
    task = harness.join(join_request(instance_id="i-0"))
    await settle()
    await harness.clock.advance(INITIAL_DELAY_MS)
    response = await task
    assert response.error_code == ErrorCode.NONE
    assert response.member_id.startswith("i-0-")
    assert response.members[0].group_instance_id == "i-0"


async def test_initial_delay_extends_while_members_arrive_capped_by_rebalance_timeout() -> None:
    harness = await Harness(config=CoordinatorConfig(group_initial_rebalance_delay_ms=3000)).start()
    first = harness.join(join_request(instance_id="i-0", rebalance_ms=7000))
    await settle()
    await harness.clock.advance(2000)
    second = harness.join(join_request(instance_id="i-1", rebalance_ms=7000))
    await settle()
    await harness.clock.advance(1000)  # t=3000: a member arrived, extend by 3000
    assert not first.done()
    await harness.clock.advance(2000)  # t=5000
    third = harness.join(join_request(instance_id="i-2", rebalance_ms=7000))
    await settle()
    await harness.clock.advance(1000)  # t=6000: extend again, but only 1000 remain (cap 7000)
    assert not first.done()
    await harness.clock.advance(1000)  # t=7000
    responses = [await first, await second, await third]
    assert {r.generation_id for r in responses} == {1}
    assert harness.clock.now_ms() == 7000
    await harness.coordinator.close()


async def test_full_rebalance_leader_assigns_followers_receive(harness: Harness) -> None:
    responses = await harness.form_group(["i-0", "i-1", "i-2"])
    leader = [r for r in responses if r.leader == r.member_id]
    assert len(leader) == 1
    assert len(leader[0].members) == 3
    assert all(not r.members for r in responses if r is not leader[0])
    assert await harness.state() == "Stable"
    sync = await harness.sync(responses[1].member_id, 1)
    assert sync.assignment == b"i-1"


async def test_sync_errors(harness: Harness) -> None:
    responses = await harness.form_group(["i-0", "i-1"])
    member = responses[0]
    assert (await harness.sync(member.member_id, 7)).error_code == ErrorCode.ILLEGAL_GENERATION
    assert (await harness.sync("nobody", 1)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    unknown_group = await harness.sync("nobody", 1, group_id="other")
    assert unknown_group.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await harness.sync("x", 1, group_id="")).error_code == ErrorCode.INVALID_GROUP_ID


async def test_follower_sync_parks_until_leader_assigns(harness: Harness) -> None:
    tasks = [harness.join(join_request(instance_id=f"i-{n}")) for n in range(2)]
    responses = await harness.finish_join(tasks)
    leader = next(r for r in responses if r.leader == r.member_id)
    follower = next(r for r in responses if r is not leader)
    follower_sync = harness.sync(follower.member_id, 1)
    await settle()
    assert not follower_sync.done()
    assert await harness.state() == "CompletingRebalance"
    await harness.sync(leader.member_id, 1, {follower.member_id: b"A", leader.member_id: b"B"})
    assert (await follower_sync).assignment == b"A"


async def test_static_rejoin_in_stable_no_rebalance_and_old_id_fenced(harness: Harness) -> None:
    responses = await harness.form_group(["i-0", "i-1", "i-2"])
    follower = next(r for r in responses if r.leader != r.member_id)
    instance = next(
        m.group_instance_id
        for m in next(r for r in responses if r.leader == r.member_id).members
        if m.member_id == follower.member_id
    )
    rejoin = await harness.coordinator.join_group(join_request(instance_id=instance))
    assert rejoin.error_code == ErrorCode.NONE
    assert rejoin.generation_id == 1, "no new generation for a static rejoin"
    assert rejoin.member_id != follower.member_id
    assert rejoin.skip_assignment is False
    assert await harness.state() == "Stable"
    sync = await harness.sync(rejoin.member_id, 1, instance_id=instance)
    assert instance is not None
    assert sync.assignment == instance.encode(), "the cached assignment is served"
    # The replaced member id is fenced everywhere it shows its instance id.
    old = follower.member_id
    assert await harness.heartbeat(old, 1, instance) == ErrorCode.FENCED_INSTANCE_ID
    fenced_sync = await harness.sync(old, 1, instance_id=instance)
    assert fenced_sync.error_code == ErrorCode.FENCED_INSTANCE_ID
    fenced_join = await harness.coordinator.join_group(join_request(old, instance))
    assert fenced_join.error_code == ErrorCode.FENCED_INSTANCE_ID
    rows = await harness.coordinator.journal_rows(GROUP)
    assert [r.kind for r in rows].count("rebalance_started") == 1
    assert any(r.kind == "member_fenced" and r.member_id == old for r in rows)


async def test_static_leader_rejoin_gets_skip_assignment_and_members(harness: Harness) -> None:
    responses = await harness.form_group(["i-0", "i-1"])
    leader = next(r for r in responses if r.leader == r.member_id)
    leader_instance = next(
        m.group_instance_id for m in leader.members if m.member_id == leader.member_id
    )
    rejoin = await harness.coordinator.join_group(join_request(instance_id=leader_instance))
    assert rejoin.error_code == ErrorCode.NONE
    assert rejoin.skip_assignment is True
    assert rejoin.leader == rejoin.member_id, "KIP-814: the new member id is the leader"
    assert {m.group_instance_id for m in rejoin.members} == {"i-0", "i-1"}
    assert rejoin.generation_id == 1
    sync = await harness.sync(rejoin.member_id, 1)
    assert leader_instance is not None
    assert sync.assignment == leader_instance.encode()


async def test_static_rejoin_changing_selected_protocol_rebalances(harness: Harness) -> None:
    responses = await harness.form_group(["i-0", "i-1"], names=("range",))
    # i-0 restarts offering [cooperative-sticky, range]: candidates are still {range} because
    # i-1 only has range, so the selection does not change and there is no rebalance.
    first = await harness.coordinator.join_group(
        join_request(instance_id="i-0", names=("cooperative-sticky", "range"))
    )
    assert first.generation_id == 1
    assert await harness.state() == "Stable"
    # i-1 does the same: now everyone votes cooperative-sticky, the selection changes.
    second = harness.join(join_request(instance_id="i-1", names=("cooperative-sticky", "range")))
    await settle()
    assert await harness.state() == "PreparingRebalance"
    rejoin_first = harness.join(
        join_request(first.member_id, "i-0", names=("cooperative-sticky", "range"))
    )
    await settle()
    results = [await second, await rejoin_first]
    assert {r.generation_id for r in results} == {2}
    assert {r.protocol_name for r in results} == {"cooperative-sticky"}
    del responses


async def test_static_rejoin_during_completing_rebalance_starts_over(harness: Harness) -> None:
    tasks = [harness.join(join_request(instance_id=f"i-{n}")) for n in range(2)]
    responses = await harness.finish_join(tasks)
    follower = next(r for r in responses if r.leader != r.member_id)
    follower_sync = harness.sync(follower.member_id, 1)
    await settle()
    instance = "i-0" if follower.member_id.startswith("i-0") else "i-1"
    replacement = harness.join(join_request(instance_id=instance))
    await settle()
    assert await harness.state() == "PreparingRebalance"
    assert (await follower_sync).error_code == ErrorCode.FENCED_INSTANCE_ID
    assert not replacement.done()


async def test_join_deadline_removes_dynamic_keeps_static(harness: Harness) -> None:
    # Sessions outlive the rebalance timeout, so only the join deadline removes anyone.
    responses = await harness.form_group(["i-0", None], session_ms=120_000)
    static = next(r for r in responses if r.member_id.startswith("i-0"))
    dynamic = next(r for r in responses if r is not static)
    # A third member joins: everyone must rejoin. Neither existing member does.
    newcomer = harness.join(join_request(instance_id="i-2", session_ms=120_000))
    await settle()
    await harness.clock.advance(REBALANCE_MS)
    response = await newcomer
    assert response.error_code == ErrorCode.NONE
    (described,) = await harness.coordinator.describe_groups([GROUP])
    ids = {m.member_id for m in described.members}
    assert static.member_id in ids, "KIP-345: static members stay"
    assert dynamic.member_id not in ids, "dynamic members that did not rejoin are removed"
    assert response.leader == response.member_id, "a member that rejoined leads"


async def test_sync_deadline_removes_members_and_rebalances(harness: Harness) -> None:
    tasks = [harness.join(join_request(instance_id=f"i-{n}", session_ms=120_000)) for n in range(3)]
    responses = await harness.finish_join(tasks)
    leader = next(r for r in responses if r.leader == r.member_id)
    laggard = next(r for r in responses if r is not leader)
    others = [r for r in responses if r is not laggard]
    syncs = [
        harness.sync(r.member_id, 1, {r.member_id: b"x"} if r is leader else None) for r in others
    ]
    [await s for s in syncs]
    assert await harness.state() == "Stable"
    await harness.clock.advance(REBALANCE_MS)
    (described,) = await harness.coordinator.describe_groups([GROUP])
    assert laggard.member_id not in {m.member_id for m in described.members}
    assert described.group_state == "PreparingRebalance"


async def test_session_timeout_removes_static_member_and_rebalances(harness: Harness) -> None:
    responses = await harness.form_group(["i-0", "i-1"])
    keeper = responses[0]
    await harness.clock.advance(SESSION_MS // 2)
    assert await harness.heartbeat(keeper.member_id, 1) == ErrorCode.NONE
    await harness.clock.advance(SESSION_MS // 2 - 1)
    assert await harness.heartbeat(keeper.member_id, 1) == ErrorCode.NONE
    assert await harness.state() == "Stable"
    await harness.clock.advance(1)  # the silent member's session ends now
    (described,) = await harness.coordinator.describe_groups([GROUP])
    assert [m.member_id for m in described.members] == [keeper.member_id]
    assert await harness.heartbeat(keeper.member_id, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    rows = await harness.coordinator.journal_rows(GROUP)
    removed = [r for r in rows if r.kind == "member_removed"]
    assert removed and removed[0].detail["reason"] == "session_timeout"


async def test_protocol_selection_by_votes_and_inconsistent_protocol(harness: Harness) -> None:
    a = harness.join(join_request(instance_id="a", names=("roundrobin", "range")))
    b = harness.join(join_request(instance_id="b", names=("range", "roundrobin")))
    c = harness.join(join_request(instance_id="c", names=("range", "roundrobin", "sticky")))
    await settle()
    # A member sharing nothing with the group is refused at once.
    d = await harness.coordinator.join_group(join_request(instance_id="d", names=("sticky",)))
    assert d.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    wrong_type = await harness.coordinator.join_group(
        join_request(instance_id="e", protocol_type="connect")
    )
    assert wrong_type.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    results = await harness.finish_join([a, b, c])
    assert {r.protocol_name for r in results} == {"range"}, "two votes beat one"


async def test_cooperative_member_rejected_by_eager_group(harness: Harness) -> None:
    await harness.form_group(["i-0", "i-1"], names=("range",))
    response = await harness.coordinator.join_group(
        join_request(instance_id="i-9", names=("cooperative-sticky",))
    )
    assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert await harness.state() == "Stable"


async def test_leader_rejoin_in_stable_rebalances_follower_does_not(harness: Harness) -> None:
    responses = await harness.form_group(["i-0", "i-1"])
    leader = next(r for r in responses if r.leader == r.member_id)
    follower = next(r for r in responses if r is not leader)
    same = await harness.coordinator.join_group(
        join_request(
            follower.member_id,
            follower.member_id.split("-")[0] + "-" + follower.member_id.split("-")[1],
        )
    )
    assert same.error_code == ErrorCode.NONE and same.generation_id == 1
    assert await harness.state() == "Stable"
    instance = leader.member_id[:3]
    task = harness.join(join_request(leader.member_id, instance))
    await settle()
    assert await harness.state() == "PreparingRebalance"
    task.cancel()


async def test_group_max_size() -> None:
    harness = await Harness(
        config=CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_size=2)
    ).start()
    await harness.form_group(["i-0", "i-1"])
    third = await harness.coordinator.join_group(join_request(instance_id="i-2"))
    assert third.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    # A known static member may still rejoin.
    again = await harness.coordinator.join_group(join_request(instance_id="i-1"))
    assert again.error_code == ErrorCode.NONE
    await harness.coordinator.close()


@pytest.mark.parametrize(
    ("request_kwargs", "expected"),
    [
        ({"group_id": ""}, ErrorCode.INVALID_GROUP_ID),
        ({"session_ms": 1000}, ErrorCode.INVALID_SESSION_TIMEOUT),
        ({"session_ms": 1_800_001}, ErrorCode.INVALID_SESSION_TIMEOUT),
        ({"names": ()}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        ({"protocol_type": ""}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        ({"member_id": "ghost"}, ErrorCode.UNKNOWN_MEMBER_ID),
    ],
)
async def test_bad_join_requests_get_kafka_errors(
    harness: Harness, request_kwargs: dict[str, object], expected: ErrorCode
) -> None:
    response: JoinGroupResponse = await harness.coordinator.join_group(
        join_request(**request_kwargs)  # type: ignore[arg-type]
    )
    assert response.error_code == expected
    assert await harness.coordinator.list_groups() == []


async def test_closed_coordinator_answers_not_available() -> None:
    harness = await Harness().start()
    await harness.coordinator.close()
    response = await harness.coordinator.join_group(join_request(instance_id="x"))
    assert response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE


async def test_protocol_counts_follow_joins_replacements_and_leaves(harness: Harness) -> None:
    """The incremental protocol counts always equal a recount over the members."""
    from collections import Counter

    from coordinator import LeaveGroupRequest, MemberIdentity

    def recount() -> Counter[str]:
        group = harness.coordinator._groups[GROUP]
        return Counter(n for m in group.members.values() for n in m.protocol_names)

    await harness.form_group(["i-0", "i-1", "i-2"], names=("range",))
    assert harness.coordinator._groups[GROUP].protocol_counts == recount()
    await harness.coordinator.join_group(
        join_request(instance_id="i-0", names=("cooperative-sticky", "range"))
    )
    group = harness.coordinator._groups[GROUP]
    assert group.protocol_counts == recount() == Counter({"range": 3, "cooperative-sticky": 1})
    await harness.coordinator.leave_group(LeaveGroupRequest(GROUP, [MemberIdentity("", "i-0")]))
    assert group.protocol_counts == recount() == Counter({"range": 2})
    assert group.candidate_protocols() == {"range"}


async def test_a_shorter_session_timeout_on_rejoin_applies_at_once(harness: Harness) -> None:
    """Heartbeats re-arm the session timer lazily; a shorter timeout must still be exact."""
    responses = await harness.form_group(["i-0", "i-1"], session_ms=30_000)
    leader = next(r for r in responses if r.leader == r.member_id)
    follower = next(r for r in responses if r is not leader)
    leader_instance = leader.member_id[:3]
    # The leader rejoins with a 10 s session: a rebalance in which both rejoin.
    rejoin_leader = harness.join(join_request(leader.member_id, leader_instance, session_ms=10_000))
    rejoin_follower = harness.join(
        join_request(follower.member_id, follower.member_id[:3], session_ms=30_000)
    )
    await harness.complete_sync(await harness.finish_join([rejoin_leader, rejoin_follower]))
    for _ in range(4):  # only the follower heartbeats
        await harness.clock.advance(2_499)
        assert await harness.heartbeat(follower.member_id, 2) == ErrorCode.NONE
    assert await harness.state() == "Stable"  # 9,996 ms after the leader's last contact
    await harness.clock.advance(4)
    (described,) = await harness.coordinator.describe_groups([GROUP])
    assert [m.member_id for m in described.members] == [follower.member_id]
