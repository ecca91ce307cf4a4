"""The "Stable again" predicate: coordinator and member logs must agree."""

from __future__ import annotations

from staticfleet.demo.scenarios import leader_last
from staticfleet.demo.settle import GroupView, unsettled_reason
from tests.demo.rows import event, log, partitions


def reason_of(view, logs, wanted, now_ms) -> str:
    return unsettled_reason(view, logs, wanted, now_ms) or ""


def describe(state="Stable", members=(("m0", "member-0"), ("m1", "member-1")), leader="m1"):
    return {
        "group_state": state,
        "generation_id": 3,
        "protocol_data": "range",
        "leader": leader,
        "members": [
            {"member_id": m, "group_instance_id": i, "supported_protocols": ["range"]}
            for m, i in members
        ],
    }


def logs_holding(*split):
    return [
        log(f"member-{i}", event(10, "assigned", *held, member_id=f"m{i}"))
        for i, held in enumerate(split)
    ]


def test_settled_when_both_sides_agree():
    view = GroupView.from_describe(describe())
    assert view.leader_instance == "member-1"
    assert unsettled_reason(view, logs_holding((0, 1), (2, 3)), partitions(4), 100) is None


def test_not_settled_while_rebalancing_or_incomplete():
    logs = logs_holding((0, 1), (2, 3))
    assert "PreparingRebalance" in reason_of(
        GroupView.from_describe(describe(state="PreparingRebalance")), logs, partitions(4), 100
    )
    view = GroupView.from_describe(describe())
    assert "without an owner" in reason_of(view, logs_holding((0, 1), (2,)), partitions(4), 100)
    assert "two owners" in reason_of(view, logs_holding((0, 1, 2), (2, 3)), partitions(4), 100)
    assert "process(es)" in reason_of(view, logs[:1], partitions(4), 100)
    stranger = [logs[0], log("member-1", event(10, "assigned", 2, 3, member_id="other"))]
    assert "has not joined" in reason_of(view, stranger, partitions(4), 100)


def test_leader_goes_last():
    view = GroupView.from_describe(
        describe(members=(("m0", "member-0"), ("m1", "member-1"), ("m2", "member-2")))
    )
    assert leader_last(view, 3) == [0, 2, 1]
