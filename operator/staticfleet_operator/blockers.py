"""Why a rollout waits: one enum of causes, each a PascalCase code and a default note.

Like Strimzi's `RestartReason`: the code is what machines group by — the Event reason of a
paused rollout, the reason of its `Degraded` and `Progressing` conditions, the `reason`
label of `staticfleet_operator_rollout_blocked` and `status.rollout.blocker` — and the
message is the sentence a person reads (which pod, which member, what it offers). The
rollout's checks (`rollout/checks.py`) return a `Blocker` or None.

A module of its own, with no imports from the operator: the CRD models name the codes in
the schema, and the rollout rules make them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class BlockerCode(StrEnum):
    """What a rollout waits for (status.rollout.blocker)."""

    FLEET_IN_TRANSIT = "FleetInTransit"
    POD_TERMINATING = "PodTerminating"
    POD_MISSING = "PodMissing"
    POD_NOT_READY = "PodNotReady"
    FLEET_INCOMPLETE = "FleetIncomplete"
    COORDINATOR_VIEW_UNAVAILABLE = "CoordinatorViewUnavailable"
    GROUP_NOT_STABLE = "GroupNotStable"
    MEMBER_COUNT_MISMATCH = "MemberCountMismatch"
    MEMBER_NOT_LISTED = "MemberNotListed"
    MEMBER_NOT_REJOINED = "MemberNotRejoined"
    UNKNOWN_MEMBERS = "UnknownMembers"
    OFFERS_MISMATCH = "OffersMismatch"
    NO_SHARED_ASSIGNOR = "NoSharedAssignor"
    ASSIGNORS_INDISTINGUISHABLE = "AssignorsIndistinguishable"

    @property
    def note(self) -> str:
        """The default note: what this cause means, for docs and metric help."""
        return _NOTES[self]


_NOTES: dict[BlockerCode, str] = {
    BlockerCode.FLEET_IN_TRANSIT: "pods are being created or deleted: no plan is made on them",
    BlockerCode.POD_TERMINATING: "the pod a bounce replaced is still terminating",
    BlockerCode.POD_MISSING: "a slot has no pod yet",
    BlockerCode.POD_NOT_READY: "a member pod is not ready",
    BlockerCode.FLEET_INCOMPLETE: "fewer or more member pods are live than expected",
    BlockerCode.COORDINATOR_VIEW_UNAVAILABLE: "describing the group failed",
    BlockerCode.GROUP_NOT_STABLE: "the group is rebalancing (not Stable)",
    BlockerCode.MEMBER_COUNT_MISMATCH: "the group lists another number of members than expected",
    BlockerCode.MEMBER_NOT_LISTED: "a member's instance id is not in the group",
    BlockerCode.MEMBER_NOT_REJOINED: "the coordinator still lists a bounced member's old member id",
    BlockerCode.UNKNOWN_MEMBERS: "the group lists members with no pod in the fleet",
    BlockerCode.OFFERS_MISMATCH: "a member offers other protocols than its pod was created with",
    BlockerCode.NO_SHARED_ASSIGNOR: "a member shares no assignor with the next bounce's protocol",
    BlockerCode.ASSIGNORS_INDISTINGUISHABLE: (
        "one assignor name for eager and cooperative: a protocol change cannot be verified"
    ),
}


@dataclass(frozen=True, slots=True)
class Blocker:
    """One reason a rollout cannot take its next step now."""

    code: BlockerCode
    message: str

    def __str__(self) -> str:
        return self.message
