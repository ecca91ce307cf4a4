"""Hot-standby promotion rules (pure), one test per rule of `decide_promotions`."""

from __future__ import annotations

from staticfleet_operator.crd import PromotionStatus
from staticfleet_operator.promotion import (
    ActiveSlot,
    PodHealth,
    Standby,
    decide_promotions,
)


def _slot(slot: int, health: PodHealth = PodHealth.RUNNING, listed: bool = True) -> ActiveSlot:
    return ActiveSlot(slot, f"orders-{slot}", health, listed)


def _standby(name: str, ready: bool = True) -> Standby:
    return Standby(name, ready)


def test_deleted_member_is_taken_over_by_a_ready_standby() -> None:
    slots = [_slot(0), _slot(1, PodHealth.DELETED), _slot(2)]
    [promotion] = decide_promotions(slots, [_standby("orders-standby-0")], [])
    assert (promotion.standby, promotion.slot, promotion.instance_id) == (
        "orders-standby-0",
        1,
        "orders-1",
    )
    assert promotion.rule == "pod_deleted"


def test_running_is_never_taken() -> None:
    assert decide_promotions([_slot(0), _slot(1)], [_standby("s-0")], []) == []


def test_running_is_never_taken_nor_a_pod_still_terminating() -> None:
    """Its graceful shutdown may still commit: a takeover now would make two owners."""
    slots = [_slot(0, PodHealth.TERMINATING)]
    assert decide_promotions(slots, [_standby("s-0")], []) == []


def test_unlisted_needs_no_takeover() -> None:
    slots = [_slot(0, PodHealth.FAILED, listed=False)]
    assert decide_promotions(slots, [_standby("s-0")], []) == []


def test_ready_standby_only() -> None:
    slots = [_slot(0, PodHealth.FAILED)]
    assert decide_promotions(slots, [_standby("s-0", ready=False)], []) == []


def test_fewest_first_serves_the_lowest_slots_one_standby_each() -> None:
    slots = [_slot(3, PodHealth.DELETED), _slot(1, PodHealth.FAILED), _slot(2, PodHealth.DELETED)]
    promotions = decide_promotions(slots, [_standby("s-1"), _standby("s-0")], [])
    assert [(p.standby, p.slot) for p in promotions] == [("s-0", 1), ("s-1", 2)]


def test_node_lost_too() -> None:
    [promotion] = decide_promotions([_slot(0, PodHealth.NODE_LOST)], [_standby("s-0")], [])
    assert promotion.rule == "node_lost_too"


def test_in_flight_first_is_resumed_and_blocks_its_slot_and_standby() -> None:
    recorded = PromotionStatus(standby="s-0", slot=1, instance_id="orders-1", rule="pod_deleted")
    slots = [_slot(1, PodHealth.DELETED), _slot(2, PodHealth.DELETED)]
    promotions = decide_promotions(slots, [_standby("s-0"), _standby("s-1")], [recorded])
    assert promotions[0] == recorded
    # Slot 1 does not get a second standby; s-0 is not used twice; slot 2 gets s-1.
    assert [(p.standby, p.slot) for p in promotions[1:]] == [("s-1", 2)]


def test_no_instance_id_is_promised_twice() -> None:
    slots = [_slot(i, PodHealth.DELETED) for i in range(4)]
    standbys = [_standby(f"s-{i}") for i in range(6)]
    promotions = decide_promotions(slots, standbys, [])
    assert len({p.instance_id for p in promotions}) == len(promotions) == 4
    assert len({p.standby for p in promotions}) == 4
