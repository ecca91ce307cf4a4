"""The member's transition table (coordinator/client/member_state.py)."""

from __future__ import annotations

import itertools

import pytest

from coordinator import GroupCoordinator
from coordinator.client import GroupMember, InProcessTransport, MemberState
from coordinator.client.member_state import (
    VALID_NEXT_STATES,
    IllegalMemberTransition,
    Reset,
    is_active,
    transition,
)

from .helpers import member_config

S = MemberState

# The moves a member makes, spelled out once more so a change to the table is deliberate.
EXPECTED = {
    (S.UNJOINED, S.PREPARING_REBALANCE),
    (S.UNJOINED, S.COMPLETING_REBALANCE),  # a promoted standby syncs without joining
    (S.PREPARING_REBALANCE, S.PREPARING_REBALANCE),  # a retried join
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.STABLE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.STABLE, S.PREPARING_REBALANCE),
    *((active, S.LEAVING) for active in (S.UNJOINED, S.PREPARING_REBALANCE)),
    *((active, S.LEAVING) for active in (S.COMPLETING_REBALANCE, S.STABLE)),
    *((active, S.FATAL) for active in (S.UNJOINED, S.PREPARING_REBALANCE)),
    *((active, S.FATAL) for active in (S.COMPLETING_REBALANCE, S.STABLE)),
    (S.FATAL, S.FATAL),
    (S.FATAL, S.LEAVING),
    (S.LEAVING, S.CLOSED),
}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(S, S)))
def test_transition_allows_exactly_the_table(current: MemberState, target: MemberState) -> None:
    if (current, target) in EXPECTED:
        assert transition(current, target) is target
    else:
        with pytest.raises(IllegalMemberTransition, match=f"from {current} to {target}"):
            transition(current, target)


def test_every_state_has_a_row_and_closed_is_final() -> None:
    assert set(VALID_NEXT_STATES) == set(S)
    assert VALID_NEXT_STATES[S.CLOSED] == frozenset()
    assert {s for s in S if is_active(s)} == {
        S.UNJOINED,
        S.PREPARING_REBALANCE,
        S.COMPLETING_REBALANCE,
        S.STABLE,
    }


def test_reset_levels_include_the_lower_ones() -> None:
    assert Reset.NONE < Reset.PARTITIONS < Reset.GENERATION < Reset.MEMBER_ID


async def test_closing_an_unstarted_member_goes_through_leaving_to_closed(
    coordinator: GroupCoordinator,
) -> None:
    member = GroupMember(InProcessTransport(coordinator), member_config())
    seen: list[MemberState] = [member.state]
    await member.close()
    seen.append(member.state)
    assert seen == [S.UNJOINED, S.CLOSED]
    await member.close()  # a second close is a no-op, not an illegal CLOSED -> LEAVING
    assert member.state is S.CLOSED
