"""Our coordinator against a real Kafka broker, scenario by scenario (staticfleet.conformance).

Every step must answer the same (in relational form) unless the difference is listed in the
runner's tables: issue-9 items another change removes, or differences documented in
docs/coordinator.md. The consumer-protocol (KIP-848) section runs on the broker alone, each
answer checked against what its scenario pins (docs/kafka.md, "The consumer protocol").
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from pathlib import Path

import pytest

from staticfleet.conformance import runner
from staticfleet.conformance.consumer_scenarios import CONSUMER_SCENARIOS
from staticfleet.conformance.runner import PinnedResult, ScenarioResult
from staticfleet.conformance.scenarios import SCENARIOS
from staticfleet.conformance.session import Matches
from staticfleet.kafka.broker import KafkaBroker

pytestmark = pytest.mark.kafka

DOCS = Path(__file__).resolve().parents[2] / "docs" / "coordinator.md"


@pytest.fixture(scope="module")
def results(kafka_broker: KafkaBroker) -> list[ScenarioResult]:
    return asyncio.run(runner.run_all(kafka_broker.bootstrap, kafka_broker.create_topic))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_answers_as_the_broker(results: list[ScenarioResult], name: str) -> None:
    (result,) = [r for r in results if r.name == name]
    unexplained = [
        f"{step.label}\n  kafka:    {step.kafka}\n  embedded: {step.embedded}"
        for step in result.differences
        if runner.expected_reason(name, step.label) is None
    ]
    assert not unexplained, "\n".join(unexplained)
    assert result.steps and all(step.kafka is not None for step in result.steps)


def test_documented_differences_still_differ_and_are_in_the_docs(
    results: list[ScenarioResult],
) -> None:
    differing = {(r.name, s.label) for r in results for s in r.differences}
    assert set(runner.DOCUMENTED) <= differing, "a documented difference is gone: delete it"
    text = DOCS.read_text(encoding="utf-8")
    for scenario, _ in runner.DOCUMENTED:
        assert re.search(rf"conformance.*{scenario}", text), scenario


def test_the_comparison_is_of_relations_and_would_see_a_difference(
    results: list[ScenarioResult],
) -> None:
    """Guards the runner itself: the broker gave real answers, and a changed answer shows."""
    summary = runner.summary(results)
    assert summary["scenarios"] == len(SCENARIOS)
    assert summary["steps_equal"] >= summary["steps"] * 0.8
    step = next(s for r in results for s in r.steps if s.equal and s.kafka)
    assert step.kafka is not None
    changed = dataclasses.replace(step, embedded={**step.kafka, "error": "SOMETHING_ELSE"})
    assert not changed.equal


# ------------------------------------------------------------------ the consumer protocol


@pytest.fixture(scope="module")
def pinned(kafka_broker: KafkaBroker) -> list[PinnedResult]:
    """The consumer-protocol section on the broker alone (our coordinator speaks classic only).
    Its topic is the classic section's: created here unless that section made it first."""

    def create_once(name: str, partitions: int) -> None:
        if name not in kafka_broker.admin().list_topics(timeout=10).topics:
            kafka_broker.create_topic(name, partitions)

    return asyncio.run(runner.run_consumer_protocol(kafka_broker.bootstrap, create_once))


@pytest.mark.parametrize("name", list(CONSUMER_SCENARIOS))
def test_consumer_protocol_scenario_answers_as_pinned(
    pinned: list[PinnedResult], name: str
) -> None:
    (result,) = [r for r in pinned if r.name == name]
    failing = [
        f"{step.label}: {'; '.join(step.mismatches)}\n  answer: {step.record}"
        for step in result.failures
    ]
    assert not failing, "\n".join(failing)
    # Every step pins something: a step that pins nothing would pass whatever the broker said.
    assert result.steps and all(step.expected for step in result.steps)
    assert all("failed" not in step.record for step in result.steps)


def test_a_batch_leave_by_instance_ids_on_a_consumer_group_is_measured(
    pinned: list[PinnedResult],
) -> None:
    (result,) = [r for r in pinned if r.name == "consumer_leave_by_instance_ids"]
    [leave] = [step for step in result.steps if "round_trip_ms" in step.measured]
    assert leave.record["error"] == "NONE"
    assert 0 < leave.measured["round_trip_ms"] < 60_000
    print(
        f"LeaveGroup by instance ids on a consumer group: {leave.measured['round_trip_ms']:.1f} ms"
    )
    print(runner.consumer_report(pinned))


def test_a_changed_answer_fails_its_pin(pinned: list[PinnedResult]) -> None:
    """Guards the pins themselves: a different answer at a pinned key is a failure."""
    summary = runner.consumer_summary(pinned)
    assert summary["consumer_protocol_scenarios"] == len(CONSUMER_SCENARIOS)
    assert summary["pinned"] == summary["steps"] and not summary["failing"]
    step = next(s for r in pinned for s in r.steps if s.expected.get("error") == "NONE")
    changed = dataclasses.replace(step, record={**step.record, "error": "FENCED_MEMBER_EPOCH"})
    assert changed.mismatches == ["error: expected 'NONE', got 'FENCED_MEMBER_EPOCH'"]
    ranged = next(
        s
        for r in pinned
        for s in r.steps
        if any(isinstance(v, Matches) for v in s.expected.values())
    )
    emptied = dataclasses.replace(ranged, record={k: None for k in ranged.record})
    assert emptied.mismatches


def test_the_command_runs_a_consumer_protocol_scenario_alone(
    pinned: list[PinnedResult], kafka_broker: KafkaBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m staticfleet.conformance.runner --bootstrap … consumer_join`: that section
    only (no classic run), its summary last, exit 0; a name of neither section is refused."""
    code = runner.main(["--bootstrap", kafka_broker.bootstrap, "consumer_join"])
    output = capsys.readouterr().out
    summary = json.loads(output.strip().splitlines()[-1])
    assert code == 0, output
    assert summary["consumer_protocol_scenarios"] == 1 and not summary["failing"], output
    assert "scenarios" not in summary and "steps equal" not in output
    with pytest.raises(SystemExit) as exit_:
        runner.main(["--bootstrap", kafka_broker.bootstrap, "no_such_scenario"])
    assert exit_.value.code == 2
