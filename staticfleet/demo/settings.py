"""The knobs of one demo run."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

DEFAULT_OUTPUT_DIR = Path("demo-output")


@dataclass(frozen=True, slots=True)
class DemoSettings:
    members: int = 6
    partitions: int = 48
    session_timeout_ms: int = 10_000
    # Short, so rebalances notice a departure within about a second (Kafka's default is 3 s).
    heartbeat_interval_ms: int = 1_000
    # Bounds a join phase; every member is alive in the demo, so it is rarely reached.
    rebalance_timeout_ms: int = 10_000
    # Small, so a fresh fleet forms quickly, but long enough for the processes to arrive.
    initial_rebalance_delay_ms: int = 1_000
    commit_interval_ms: int = 500
    records_per_second: float = 10.0
    topic: str = "events"
    output_dir: Path = DEFAULT_OUTPUT_DIR
    # How long to wait for a group to be Stable again before giving up on the run.
    settle_timeout_s: float = 60.0
    quick: bool = False
    # Scenario numbers to run ("7" runs 7a, 7b, 7c); empty: all of them.
    scenarios: tuple[str, ...] = ()
    # --coordinator kafka: the listener members and the demo's admin calls use (SASL_SSL or
    # SSL start the secured broker; docs/kafka.md, "Secured clusters").
    kafka_listener: Literal["PLAINTEXT", "SASL_SSL", "SSL"] = "PLAINTEXT"

    def __post_init__(self) -> None:
        if self.members < 3:
            raise ValueError("--members must be at least 3 (scenario 4 stops two of them)")
        if self.partitions < self.members:
            raise ValueError("--partitions must be at least --members")
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            raise ValueError("the heartbeat interval must be below the session timeout")
        if self.kafka_listener not in ("PLAINTEXT", "SASL_SSL", "SSL"):
            raise ValueError("--kafka-listener must be PLAINTEXT, SASL_SSL or SSL")

    @classmethod
    def quick_run(cls, **overrides: object) -> DemoSettings:
        """Smaller and faster, for tests and a first look."""
        base = cls(
            members=4,
            partitions=16,
            session_timeout_ms=6_000,
            rebalance_timeout_ms=8_000,
            initial_rebalance_delay_ms=500,
            settle_timeout_s=45.0,
            quick=True,
        )
        return replace(base, **overrides)  # type: ignore[arg-type]

    def runs(self, number: str) -> bool:
        """Whether scenario `number` (e.g. "7c") is selected."""
        return not self.scenarios or any(
            number == wanted or (number.startswith(wanted) and not number[len(wanted)].isdigit())
            for wanted in self.scenarios
        )

    @property
    def min_session_timeout_ms(self) -> int:
        """What the coordinator must accept: Kafka's 6 s floor, lowered if asked for less."""
        return min(6_000, self.session_timeout_ms)
