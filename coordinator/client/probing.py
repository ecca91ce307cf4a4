"""KIP-268 version probing, member side: when an assignment means "rejoin now".

Only assignors with versioned user data take part (static-sticky). The assignor tracks
the versions itself (`on_assignment` reads the leader's supported version and the probing
flag from the assignment's user data, `subscription_user_data` sends the version it may
use); this module turns its state into a rejoin decision. Three cases:

1. Probing requested: the leader could not read some subscription and moved nothing; this
   member rejoins at once with the version the leader named (its `used_version`).
2. Should upgrade: the leader now supports a newer version than this member last sent.
   It rejoins at once, which is KIP-268's final "upgrade" rebalance. This is bounded: it
   happens once per version change (the assignor clears the flag when the newer version is
   sent), and members that learn it from the same assignment rejoin together, so their
   rejoins fold into one rebalance.
3. A static leader that rejoined without a rebalance (KIP-814 `skip_assignment`) took the
   assignment an older leader wrote. If its own version is newer, nobody will hear of it
   until some rebalance, so it triggers one (KIP-268: "the leader should be responsible to
   trigger this final rebalance"). In that rebalance it assigns and announces its version,
   case 2 follows, and the group runs the new version: one rolling bounce in all.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class VersionProbingAssignor(Protocol):
    @property
    def version(self) -> int:
        """The newest user-data version this member speaks."""
        ...

    @property
    def used_version(self) -> int:
        """The version this member sends now (capped by the leader's)."""
        ...

    @property
    def leader_supported_version(self) -> int | None:
        """The newest version the last assignment's leader said it supports."""
        ...

    @property
    def probing_requested(self) -> bool: ...

    @property
    def should_upgrade(self) -> bool: ...


def rejoin_reason(assignor: object, *, skipped_assignment_as_leader: bool) -> str | None:
    """Why this member must rejoin at once after an assignment, or None."""
    if not isinstance(assignor, VersionProbingAssignor):
        return None
    if assignor.probing_requested:
        return (
            f"KIP-268 version probing: the leader reads user data up to "
            f"v{assignor.used_version}; rejoining with it"
        )
    if assignor.should_upgrade:
        return f"KIP-268: the leader supports v{assignor.used_version}; rejoining to upgrade"
    announced = assignor.leader_supported_version
    if skipped_assignment_as_leader and announced is not None and assignor.version > announced:
        return (
            f"KIP-268: this leader speaks v{assignor.version} but the group's assignment "
            f"was written by a v{announced} leader; rebalancing so the group can upgrade"
        )
    return None
