"""Pure parts of the Kafka backend and its journal: what Kafka's DescribeGroups lacks, filled
in (offers, generation), per-member LeaveGroup errors, and the journal rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from coordinator import DescribedGroup, ErrorCode, LeaveGroupResponse
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.messages import DescribedGroupMember, LeaveGroupMemberResponse
from coordinator.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    encode_assignment,
    encode_subscription,
)
from staticfleet_operator.backends import from_kafka, leave_errors, widen_offers
from staticfleet_operator.kafka_journal import RebalanceJournal
from staticfleet_operator.rollout import Assignors, CoordinatorView, MemberPod

COMPATIBLE = RebalanceProtocolSetting.COMPATIBLE
EAGER = RebalanceProtocolSetting.EAGER
ASSIGNORS = Assignors(eager="range", cooperative="cooperative-sticky")


def member(instance: str, generation: int, partitions: list[int]) -> DescribedGroupMember:
    return DescribedGroupMember(
        member_id=f"{instance}-m{generation}",
        group_instance_id=instance,
        client_id=instance,
        client_host="/127.0.0.1",
        member_metadata=encode_subscription(Subscription(("t",), generation_id=generation)),
        member_assignment=encode_assignment(
            Assignment(tuple(TopicPartition("t", p) for p in partitions))
        ),
    )


def group(protocol: str, *members: DescribedGroupMember, state: str = "Stable") -> DescribedGroup:
    return DescribedGroup(ErrorCode.NONE, "g", state, "consumer", protocol, list(members))


def pod(slot: int, protocol: RebalanceProtocolSetting) -> MemberPod:
    return MemberPod(slot, f"g-{slot}", f"p-{slot}", protocol, "h", ready=True)


def test_from_kafka_reads_offers_and_generation_from_what_describe_has() -> None:
    described = from_kafka(group("range", member("g-0", 3, [0]), member("g-1", -1, [1])))
    assert described.generation_id == 4  # members reported generation 3 at their last join
    assert [m.supported_protocols for m in described.members] == [["range"], ["range"]]
    assert from_kafka(group("", state="Empty")).generation_id == -1


def test_offers_widen_only_when_the_broker_agrees_with_the_pod() -> None:
    view = CoordinatorView.from_described(
        from_kafka(group("range", member("g-0", 1, [0]), member("g-1", 1, [1])))
    )
    widened = widen_offers(view, [pod(0, COMPATIBLE), pod(1, EAGER)], ASSIGNORS)
    offers = {m.instance_id: m.supported_protocols for m in widened.members}
    assert offers == {"g-0": {"cooperative-sticky", "range"}, "g-1": {"range"}}
    # The broker selected an assignor the pod was not created with: trust only the broker.
    view = CoordinatorView.from_described(
        from_kafka(group("cooperative-sticky", member("g-1", 1, [1])))
    )
    [only] = widen_offers(view, [pod(1, EAGER)], ASSIGNORS).members
    assert only.supported_protocols == {"cooperative-sticky"}


def test_leave_errors_name_each_member() -> None:
    response = LeaveGroupResponse(
        ErrorCode.NONE,
        [
            LeaveGroupMemberResponse("", "g-4", ErrorCode.NONE),
            LeaveGroupMemberResponse("", "g-5", ErrorCode.UNKNOWN_MEMBER_ID),
        ],
    )
    assert leave_errors(response) == ["g-5: UNKNOWN_MEMBER_ID"]


def test_journal_records_a_rebalance_and_a_static_rejoin(tmp_path: Path) -> None:
    journal = RebalanceJournal(tmp_path)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    first = from_kafka(group("range", member("g-0", 1, [0, 1]), member("g-1", 1, [2, 3])))
    # The first sight records the assignment found (later moves are counted from it).
    assert [e.kind for e in journal.observe(first, now)] == [
        "generation_started",
        "assignment",
        "assignment",
        "stable",
    ]
    # g-1 restarted as the same static member: new member id, same partitions.
    rejoined = group("range", member("g-0", 1, [0, 1]), member("g-1", 1, [2, 3]))
    rejoined.members[1] = DescribedGroupMember(
        "g-1-new",
        "g-1",
        "g-1",
        "/h",
        rejoined.members[1].member_metadata,
        rejoined.members[1].member_assignment,
    )
    kinds = [e.kind for e in journal.observe(from_kafka(rejoined), now + timedelta(seconds=1))]
    assert kinds == ["static_rejoin"]
    journal.observe(from_kafka(group("", state="PreparingRebalance")), now + timedelta(seconds=2))
    after = from_kafka(group("range", member("g-0", 2, [0, 1, 2, 3])))
    rows = journal.observe(after, now + timedelta(seconds=3))
    assert [e.kind for e in rows] == ["generation_started", "assignment", "stable"]
    assert rows[1].detail == {"partitions": [["t", p] for p in range(4)]}
    written = (tmp_path / "g.jsonl").read_text().splitlines()
    assert len(written) == 4 + 1 + 1 + 3  # first sight, static_rejoin, rebalance, the three
