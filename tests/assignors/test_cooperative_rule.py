"""The public cooperative helper (what a member client can use to check an assignment)."""

from __future__ import annotations

from coordinator.assignors import adjust_for_cooperative, partitions_transferring_ownership
from coordinator.protocol import TopicPartition

P = [TopicPartition("t", p) for p in range(4)]


def test_transfer_is_withheld_and_reported() -> None:
    assignment = {"a": [P[0]], "b": [P[1], P[2]]}
    owned = {"a": [P[0], P[1]], "b": []}
    adjustment = adjust_for_cooperative(assignment, owned)
    assert adjustment.assignment == {"a": (P[0],), "b": (P[2],)}
    assert adjustment.pending == {P[1]: "b"}


def test_partition_owned_by_two_members_is_withheld_from_both() -> None:
    owned = {"a": [P[0]], "b": [P[0]]}
    assert partitions_transferring_ownership({"a": [P[0]], "b": []}, owned) == {P[0]: "a"}


def test_nothing_owned_means_nothing_withheld() -> None:
    assignment = {"a": [P[0], P[1]], "b": [P[2], P[3]]}
    adjustment = adjust_for_cooperative(assignment, {"a": [], "b": []})
    assert adjustment.assignment == {"a": (P[0], P[1]), "b": (P[2], P[3])}
    assert adjustment.pending == {}
