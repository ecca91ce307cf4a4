"""When is a group "Stable again"? Both sides must agree.

The coordinator (describe) says Stable with the expected members, *and* the member
processes (their event logs) hold every partition exactly once with the member ids the
coordinator knows. Describe alone is not enough: after a cooperative revocation the group
is briefly Stable while the follow-up rebalance has not started, and the logs show the
partitions in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from staticfleet.demo.admin import AdminError
from staticfleet.demo.ownership import MemberLog, Partition, all_holdings, held_at


@dataclass(frozen=True, slots=True)
class GroupView:
    state: str
    generation_id: int
    protocol: str
    leader: str
    leader_instance: str | None
    member_ids: frozenset[str]
    instance_ids: frozenset[str]
    protocols_by_instance: Mapping[str, tuple[str, ...]]

    @classmethod
    def from_describe(cls, described: Mapping[str, Any]) -> GroupView:
        members = described.get("members") or []
        leader = str(described.get("leader", ""))
        return cls(
            state=str(described.get("group_state", "")),
            generation_id=int(described.get("generation_id", -1)),
            protocol=str(described.get("protocol_data", "")),
            leader=leader,
            leader_instance=next(
                (m.get("group_instance_id") for m in members if m["member_id"] == leader), None
            ),
            member_ids=frozenset(str(m["member_id"]) for m in members),
            instance_ids=frozenset(
                str(m["group_instance_id"]) for m in members if m.get("group_instance_id")
            ),
            protocols_by_instance={
                str(m.get("group_instance_id") or m["member_id"]): tuple(
                    m.get("supported_protocols") or []
                )
                for m in members
            },
        )


def current_member_id(log: MemberLog) -> str:
    for row in reversed(log.rows):
        if row.get("member_id"):
            return str(row["member_id"])
    return ""


def unsettled_reason(
    view: GroupView,
    live_logs: Sequence[MemberLog],
    partitions: Iterable[Partition],
    now_ms: int,
) -> str | None:
    """Why the group is not settled yet, or None when it is."""
    if view.state != "Stable":
        return f"group is {view.state or 'unknown'}"
    if len(view.member_ids) != len(live_logs):
        return (
            f"{len(view.member_ids)} member(s) in the group, {len(live_logs)} process(es) running"
        )
    for log in live_logs:
        if current_member_id(log) not in view.member_ids:
            return f"{log.process} has not joined yet"
    held = held_at(all_holdings(live_logs), now_ms)
    missing = [p for p in partitions if not held.get(p)]
    if missing:
        return f"{len(missing)} partition(s) without an owner"
    doubled = [p for p, owners in held.items() if len(owners) > 1]
    if doubled:
        return f"{len(doubled)} partition(s) with two owners"
    return None


class SettleTimeout(RuntimeError):
    pass


def wait_until_settled(
    describe: Callable[[], Mapping[str, Any]],
    live_logs: Callable[[], Sequence[MemberLog]],
    partitions: Sequence[Partition],
    now_ms: Callable[[], int],
    timeout_s: float,
    poll_s: float = 0.1,
    confirm_s: float = 0.4,
) -> GroupView:
    """Poll until settled, and still settled in the same generation `confirm_s` later (a
    follow-up rebalance would show up by then). Transient describe failures (a coordinator
    coming back) are retried."""
    deadline = time.monotonic() + timeout_s
    candidate: tuple[int, float] | None = None
    reason = "not checked yet"
    while time.monotonic() < deadline:
        try:
            view = GroupView.from_describe(describe())
        except AdminError as error:
            reason = f"describe failed: {error}"
            candidate = None
        else:
            reason = unsettled_reason(view, live_logs(), partitions, now_ms()) or ""
            if reason:
                candidate = None
            elif candidate is None or candidate[0] != view.generation_id:
                candidate = (view.generation_id, time.monotonic())
            elif time.monotonic() - candidate[1] >= confirm_s:
                return view
        time.sleep(poll_s)
    raise SettleTimeout(f"the group did not settle in {timeout_s:.0f} s: {reason}")
