"""The member client's state machine, as `coordinator/state.py` is the group's.

A `GroupMember` holds exactly one `MemberState`, and every change of it goes through
`transition`, which raises `IllegalMemberTransition` for a move the table does not list: a
wrong move fails loudly rather than drifting. The states are those of Kafka's classic
consumer (AbstractCoordinator.MemberState: UNJOINED, PREPARING_REBALANCE,
COMPLETING_REBALANCE, STABLE) plus how a member ends: LEAVING while `close()` revokes and
leaves, then CLOSED, or FATAL after an error retrying cannot fix.

What the next rejoin must drop (the member id, the generation, the owned partitions) is
not a state but one pending `Reset` level, since each level implies the ones below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum


class IllegalMemberTransition(RuntimeError):
    pass


class MemberState(StrEnum):
    UNJOINED = "unjoined"
    """Created, or started and waiting for its first join. -> PreparingRebalance."""

    PREPARING_REBALANCE = "preparing_rebalance"
    """Revoking (eager) or dropping lost partitions, then JoinGroup in flight.

    -> CompletingRebalance when the join answers; stays here across retries."""

    COMPLETING_REBALANCE = "completing_rebalance"
    """JoinGroup answered (or a promoted standby took over): topic metadata, the leader's
    assignment and SyncGroup in flight. Heartbeats are sent.

    -> Stable when the sync brings a valid assignment; -> PreparingRebalance to retry."""

    STABLE = "stable"
    """Owns its assignment; heartbeats. -> PreparingRebalance on any rejoin."""

    LEAVING = "leaving"
    """`close()` runs: tasks stopped, partitions revoked (or lost), LeaveGroup if asked.

    -> Closed (also when the member had failed: `GroupMember.error` keeps the reason)."""

    FATAL = "fatal"
    """Stopped by an error retrying cannot fix (`GroupMember.error`). -> Leaving (close)."""

    CLOSED = "closed"
    """Closed; it is never assigned anything again. Final."""


_ACTIVE = frozenset(
    {
        MemberState.UNJOINED,
        MemberState.PREPARING_REBALANCE,
        MemberState.COMPLETING_REBALANCE,
        MemberState.STABLE,
    }
)

# state -> the states it may move to
VALID_NEXT_STATES: dict[MemberState, frozenset[MemberState]] = {
    MemberState.UNJOINED: frozenset(
        {
            MemberState.PREPARING_REBALANCE,
            # a promoted standby syncs in the current generation without joining
            MemberState.COMPLETING_REBALANCE,
            MemberState.LEAVING,
            MemberState.FATAL,
        }
    ),
    MemberState.PREPARING_REBALANCE: frozenset(
        {
            MemberState.PREPARING_REBALANCE,
            MemberState.COMPLETING_REBALANCE,
            MemberState.LEAVING,
            MemberState.FATAL,
        }
    ),
    MemberState.COMPLETING_REBALANCE: frozenset(
        {
            MemberState.PREPARING_REBALANCE,
            MemberState.STABLE,
            MemberState.LEAVING,
            MemberState.FATAL,
        }
    ),
    MemberState.STABLE: frozenset(
        {MemberState.PREPARING_REBALANCE, MemberState.LEAVING, MemberState.FATAL}
    ),
    # A failure while closing (a fenced commit) is kept in `error`; close() still ends CLOSED.
    MemberState.LEAVING: frozenset({MemberState.CLOSED}),
    MemberState.FATAL: frozenset({MemberState.FATAL, MemberState.LEAVING}),
    MemberState.CLOSED: frozenset(),
}


def transition(current: MemberState, target: MemberState) -> MemberState:
    """`target` when the table allows `current -> target`; raises otherwise."""
    if target not in VALID_NEXT_STATES[current]:
        raise IllegalMemberTransition(f"a member cannot go from {current} to {target}")
    return target


def is_active(state: MemberState) -> bool:
    """True while the member takes part in the group (not leaving, failed or closed)."""
    return state in _ACTIVE


class Reset(IntEnum):
    """What the next rejoin drops; a higher level includes every lower one."""

    NONE = 0
    PARTITIONS = 1
    """The owned partitions are lost (not revoked): another member may own them now."""
    GENERATION = 2
    """ILLEGAL_GENERATION or no contact for a session: rejoin with no generation."""
    MEMBER_ID = 3
    """UNKNOWN_MEMBER_ID: rejoin as a new member."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the member was when it sent a request: the member id and generation it sent,
    and how many rejoins it had begun (an answer that arrives after a rejoin began is the
    rejoin's to decide, even when the id and generation have not changed yet)."""

    member_id: str
    generation_id: int
    rejoins: int


def is_stale(sent: Identity, now: Identity) -> bool:
    """True when an answer is about an identity the member no longer holds: it changes
    nothing, whatever it says (Kafka's `generationUnchanged()`, negated). The one rule for
    heartbeats, commits and offset fetches alike."""
    return sent != now
