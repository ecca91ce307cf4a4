"""What a scenario leaves behind: when things were done, and the raw rows to measure.

A record holds facts only (timestamps the demo took, answers it got, journal rows, member
event logs); every number in the report is computed from it afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from staticfleet.demo.ownership import MemberLog


@dataclass(frozen=True, slots=True)
class Step:
    """One disturbance, from the moment the demo acted until the group had settled."""

    label: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class Marker:
    """A moment worth a line in the timeline (members gone, coordinator killed, ...)."""

    ts_ms: int
    label: str


@dataclass(frozen=True, slots=True)
class ScenarioSpec:
    key: str
    number: str
    title: str
    group_id: str
    token: str


@dataclass
class ScenarioRecord:
    spec: ScenarioSpec
    static: bool
    protocol: str
    fleet_start_ms: int = 0
    # The measured window: from the fleet being settled to the last step settling.
    window_start_ms: int = 0
    window_end_ms: int = 0
    steps: list[Step] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    logs: list[MemberLog] = field(default_factory=list)
    journal: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
