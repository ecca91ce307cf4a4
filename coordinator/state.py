"""The classic group state machine, as Kafka's ClassicGroupState describes it.

Read this module to learn how a group answers requests in each state. A transition that is
not listed as valid raises `IllegalStateTransition`: a wrong transition fails loudly rather
than drifting.
"""

from __future__ import annotations

from enum import StrEnum


class IllegalStateTransition(RuntimeError):
    pass


class GroupState(StrEnum):
    EMPTY = "Empty"
    """No members (offsets may remain).

    join: a new member starts a rebalance, after the initial rebalance delay (any number
          of members is accepted: group_max_size is checked from the next state on)
    sync, heartbeat: UNKNOWN_MEMBER_ID
    leave: UNKNOWN_MEMBER_ID per member
    commit: allowed with generation -1 (a group not using group management)
    -> PreparingRebalance when a member joins; -> Dead when deleted
    """

    PREPARING_REBALANCE = "PreparingRebalance"
    """Waiting for every member to (re)join, up to the rebalance timeout.

    join: park the request until the join phase completes (with group_max_size: a member
          already waiting, or anyone while fewer than the limit wait; the others get
          GROUP_MAX_SIZE_REACHED and are removed)
    sync: REBALANCE_IN_PROGRESS
    heartbeat: REBALANCE_IN_PROGRESS (the member must rejoin)
    leave: remove the member; the join phase may now complete
    commit: allowed for the current generation (members commit before revoking)
    -> CompletingRebalance when everyone joined or the timeout passed (dynamic members that
       did not rejoin are removed, static ones stay: KIP-345)
    -> Empty when the last member left; -> Dead when deleted
    """

    COMPLETING_REBALANCE = "CompletingRebalance"
    """Join phase done, a new generation exists; waiting for the leader's assignment.

    join: a known member with unchanged metadata gets the current generation again;
          otherwise (or a new member) a new rebalance starts
    sync: park followers until the leader's SyncGroup brings the assignment
    heartbeat: NONE
    leave: remove the member and start a new rebalance
    commit: the member and its generation are checked first, then REBALANCE_IN_PROGRESS
    -> Stable when the leader's assignment is stored; -> PreparingRebalance on a membership
       change, a sync timeout, or a partition count change of a subscribed topic (the
       leader may have read the old one); -> Empty / Dead
    """

    STABLE = "Stable"
    """Every member has its assignment.

    join: the leader, a member with changed metadata, or a new member starts a rebalance;
          a follower with unchanged metadata gets the current generation; a static member
          rejoining with a new member id is served the cached assignment with no rebalance
          when the selected protocol and its topics would not change (KIP-345, KIP-814)
    sync: the member's current assignment
    heartbeat: NONE
    leave: remove the member and start a rebalance (a pending member id that never joined
           leaving starts none)
    commit: allowed for the current generation
    -> PreparingRebalance (a membership change, or a partition count change of a subscribed
       topic: docs/coordinator.md); -> Empty / Dead
    """

    DEAD = "Dead"
    """The group is gone (deleted). Every request: COORDINATOR_NOT_AVAILABLE / UNKNOWN."""


# state -> the states it may be entered from (Kafka's validPreviousStates)
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.COMPLETING_REBALANCE, GroupState.STABLE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.EMPTY,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
            GroupState.DEAD,
        }
    ),
}


def assert_valid_transition(current: GroupState, target: GroupState) -> None:
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalStateTransition(f"a group cannot go from {current} to {target}")
