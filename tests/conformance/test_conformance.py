"""Our coordinator against a real Kafka broker, scenario by scenario (staticfleet.conformance).

Every step must answer the same (in relational form) unless the difference is listed in the
runner's tables: issue-9 items another change removes, or differences documented in
docs/coordinator.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path

import pytest

from staticfleet.conformance import runner
from staticfleet.conformance.runner import ScenarioResult
from staticfleet.conformance.scenarios import SCENARIOS
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
