"""Run every scenario against our coordinator and a Kafka broker; compare step by step.

A difference is acceptable only when it is listed here, in `DOCUMENTED` (kept on purpose;
each one is also explained in docs/coordinator.md, "Where we differ from Kafka, and why").
Every other difference fails the conformance test.

The consumer-protocol section (`CONSUMER_SCENARIOS`, KIP-848) runs against the broker alone,
our coordinator speaking the classic protocol only: each step's answer is checked against
what the scenario pins (docs/kafka.md, "The consumer protocol").

    python -m staticfleet.conformance.runner --bootstrap 127.0.0.1:9092
    python -m staticfleet.conformance.runner --bootstrap HOST:PORT --kafka-config FILE

`--kafka-config` is a Kafka client settings file (docs/kafka.md, "Secured clusters") for a
secured listener; its principal needs READ on the conformance groups and topics.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from coordinator.client.kafka_settings import PLAINTEXT_SETTINGS, KafkaClientSettings
from staticfleet.conformance.consumer_scenarios import CONSUMER_SCENARIOS, ConsumerScenario
from staticfleet.conformance.consumer_session import ConsumerSession
from staticfleet.conformance.scenarios import SCENARIOS, TOPIC_PARTITIONS, Scenario
from staticfleet.conformance.session import Session, Step
from staticfleet.conformance.targets import EmbeddedTarget, KafkaTarget, Target

TOPIC = "conformance"

# Differences kept on purpose: (scenario, step) -> the reason (also in docs/coordinator.md).
_NO_PARTITION_CHECK = (
    "our coordinator does not check committed partitions against its topic metadata (the "
    "operator may set the metadata after members commit); the broker answers "
    "UNKNOWN_TOPIC_OR_PARTITION from its metadata cache"
)
_EMPTY_GROUP_ID = (
    "the empty group id is INVALID_GROUP_ID for every request here; the broker lets offsets "
    "be committed and fetched under it (for clients from before KIP-289), and our HTTP paths "
    "cannot name it"
)
DOCUMENTED: dict[tuple[str, str], str] = {
    ("offset_commit_and_fetch", "a partition the topic does not have"): _NO_PARTITION_CHECK,
    ("offset_commit_and_fetch", "fetch all at the end"): _NO_PARTITION_CHECK,
    ("offset_commit_and_fetch", "a generation to a group that does not exist"): (
        "our API mirrors OffsetCommit v8: ILLEGAL_GENERATION; the broker answers v9 with "
        "GROUP_ID_NOT_FOUND"
    ),
    ("offset_commit_and_fetch", "a commit to the empty group id"): _EMPTY_GROUP_ID,
    ("offset_commit_and_fetch", "a fetch from the empty group id"): _EMPTY_GROUP_ID,
    ("lone_static_member_changes_protocol", "b joins with an empty instance id"): (
        "an empty group_instance_id is INVALID_REQUEST here (it would be a static member "
        "nobody can address); the broker accepts it and only Kafka's Java client refuses it"
    ),
}


@dataclass
class StepResult:
    label: str
    kafka: dict[str, Any] | None
    embedded: dict[str, Any] | None

    @property
    def equal(self) -> bool:
        return self.kafka == self.embedded


@dataclass
class ScenarioResult:
    name: str
    steps: list[StepResult] = field(default_factory=list)

    @property
    def differences(self) -> list[StepResult]:
        return [step for step in self.steps if not step.equal]


def expected_reason(scenario: str, label: str) -> str | None:
    return DOCUMENTED.get((scenario, label))


def align(name: str, kafka: list[Step], embedded: list[Step]) -> ScenarioResult:
    result = ScenarioResult(name)
    for index in range(max(len(kafka), len(embedded))):
        k = kafka[index] if index < len(kafka) else None
        e = embedded[index] if index < len(embedded) else None
        label = (k or e).label if (k or e) else ""  # type: ignore[union-attr]
        if k is not None and e is not None and k.label != e.label:
            label = f"{k.label} | {e.label}"
        result.steps.append(StepResult(label, k.record if k else None, e.record if e else None))
    return result


async def run_on(target: Target, name: str, scenario: Scenario) -> list[Step]:
    return await _steps_of(target, scenario, Session(target, _group_of(name), TOPIC))


async def run_on_kafka(target: KafkaTarget, name: str, scenario: ConsumerScenario) -> list[Step]:
    return await _steps_of(target, scenario, ConsumerSession(target, _group_of(name), TOPIC))


def _group_of(name: str) -> str:
    return f"conformance-{name}-{uuid.uuid4().hex[:8]}"


SessionT = TypeVar("SessionT", bound=Session)


async def _steps_of(
    target: Target,
    scenario: Callable[[SessionT], Awaitable[None]],
    session: SessionT,
) -> list[Step]:
    """One scenario on one target, in a group of its own (the session's), with its topic."""
    await target.prepare(session.group_id, {TOPIC: TOPIC_PARTITIONS})
    try:
        await asyncio.wait_for(scenario(session), timeout=60)
    finally:
        for task in session.tasks:
            task.cancel()
        await target.end_scenario()
    return session.steps


@dataclass
class PinnedResult:
    """A consumer-protocol scenario on the broker: its steps, each with what it pins."""

    name: str
    steps: list[Step]

    @property
    def failures(self) -> list[Step]:
        return [step for step in self.steps if step.mismatches]


async def run_consumer_protocol(
    bootstrap: str,
    create_topic: Callable[[str, int], None] | None = None,
    names: Iterable[str] | None = None,
    *,
    settings: KafkaClientSettings = PLAINTEXT_SETTINGS,
) -> list[PinnedResult]:
    """Each consumer-protocol scenario on the broker, its answers checked against its pins."""
    kafka = KafkaTarget(f"kafka://{bootstrap}", create_topic, settings=settings)
    results = []
    try:
        for name in CONSUMER_SCENARIOS if names is None else names:
            steps = await run_on_kafka(kafka, name, CONSUMER_SCENARIOS[name])
            results.append(PinnedResult(name, steps))
    finally:
        await kafka.close()
    return results


async def run_all(
    bootstrap: str,
    create_topic: Callable[[str, int], None] | None = None,
    names: Iterable[str] | None = None,
    *,
    settings: KafkaClientSettings = PLAINTEXT_SETTINGS,
) -> list[ScenarioResult]:
    """Each scenario on both coordinators (the two runs concurrently), compared."""
    kafka = KafkaTarget(f"kafka://{bootstrap}", create_topic, settings=settings)
    embedded = EmbeddedTarget()
    results = []
    try:
        for name in names or SCENARIOS:
            scenario = SCENARIOS[name]
            kafka_steps, embedded_steps = await asyncio.gather(
                run_on(kafka, name, scenario), run_on(embedded, name, scenario)
            )
            results.append(align(name, kafka_steps, embedded_steps))
    finally:
        await kafka.close()
        await embedded.close()
    return results


def summary(results: list[ScenarioResult]) -> dict[str, Any]:
    steps = [step for result in results for step in result.steps]
    differing = [(r.name, s) for r in results for s in r.differences]
    return {
        "scenarios": len(results),
        "steps": len(steps),
        "steps_equal": sum(step.equal for step in steps),
        "documented": sum(1 for name, s in differing if (name, s.label) in DOCUMENTED),
        "unexplained": [
            f"{name}: {s.label}" for name, s in differing if expected_reason(name, s.label) is None
        ],
    }


def report(results: list[ScenarioResult]) -> str:
    lines = []
    for result in results:
        lines.append(
            f"{result.name}: {len(result.steps) - len(result.differences)}"
            f"/{len(result.steps)} steps equal"
        )
        for step in result.differences:
            reason = expected_reason(result.name, step.label) or "UNEXPLAINED"
            lines.append(f"  differs ({reason}): {step.label}")
            lines.append(f"    kafka:    {json.dumps(step.kafka, default=str)}")
            lines.append(f"    embedded: {json.dumps(step.embedded, default=str)}")
    lines.append(json.dumps(summary(results)))
    return "\n".join(lines)


def consumer_summary(results: list[PinnedResult]) -> dict[str, Any]:
    steps = [step for result in results for step in result.steps]
    return {
        "consumer_protocol_scenarios": len(results),
        "steps": len(steps),
        "pinned": sum(1 for step in steps if step.expected),
        "failing": [f"{r.name}: {s.label}" for r in results for s in r.failures],
        "measured": {
            f"{r.name}: {s.label}": s.measured for r in results for s in r.steps if s.measured
        },
    }


def consumer_report(results: list[PinnedResult]) -> str:
    lines = []
    for result in results:
        pinned = [step for step in result.steps if step.expected]
        lines.append(
            f"{result.name} (broker only): {len(pinned) - len(result.failures)}"
            f"/{len(pinned)} pinned steps answer as pinned"
        )
        for step in result.steps:
            for key, value in step.measured.items():
                lines.append(f"  measured: {step.label}: {key} {value:.1f}")
        for step in result.failures:
            lines.append(f"  differs from its pin: {step.label}")
            lines.extend(f"    {mismatch}" for mismatch in step.mismatches)
            lines.append(f"    answer: {json.dumps(step.record, default=str)}")
    lines.append(json.dumps(consumer_summary(results), default=str))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="host:port of a Kafka broker")
    parser.add_argument(
        "--kafka-config",
        metavar="FILE",
        help="Kafka client settings (.properties, librdkafka names) for a secured listener",
    )
    parser.add_argument(
        "scenarios",
        nargs="*",
        help="names, of either section (default: all)",
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.scenarios if n not in SCENARIOS and n not in CONSUMER_SCENARIOS]
    if unknown:
        parser.error(f"no such scenario: {', '.join(unknown)}")
    classic = [n for n in args.scenarios if n in SCENARIOS] if args.scenarios else list(SCENARIOS)
    consumer = (
        [n for n in args.scenarios if n in CONSUMER_SCENARIOS]
        if args.scenarios
        else list(CONSUMER_SCENARIOS)
    )
    try:
        settings = (
            KafkaClientSettings.from_file(args.kafka_config)
            if args.kafka_config
            else PLAINTEXT_SETTINGS
        )
    except ValueError as error:
        parser.error(str(error))
    failed = False
    if classic:
        results = asyncio.run(run_all(args.bootstrap, None, classic, settings=settings))
        print(report(results))
        failed = bool(summary(results)["unexplained"])
    if consumer:
        pinned = asyncio.run(
            run_consumer_protocol(args.bootstrap, None, consumer, settings=settings)
        )
        print(consumer_report(pinned))
        failed = failed or bool(consumer_summary(pinned)["failing"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
