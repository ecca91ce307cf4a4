"""The operator's journal of a Kafka-coordinated group (written from DescribeGroups) is read
by the Spark analytics job, with the same figures as the pure-Python reference."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import SparkSession

from coordinator import DescribedGroup, ErrorCode
from coordinator.messages import DescribedGroupMember
from coordinator.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    encode_assignment,
    encode_subscription,
)
from pipeline import analytics
from pipeline import reference as ref
from staticfleet_operator.backends import from_kafka
from staticfleet_operator.kafka_journal import RebalanceJournal


def _member(instance: str, generation: int, partitions: list[int]) -> DescribedGroupMember:
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


def _group(state: str, *members: DescribedGroupMember) -> DescribedGroup:
    return from_kafka(DescribedGroup(ErrorCode.NONE, "kg", state, "consumer", "range", [*members]))


def test_spark_reads_the_kafka_journal(spark: SparkSession, tmp_path: Path) -> None:
    journal = RebalanceJournal(tmp_path / "journal")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    journal.observe(_group("Stable", _member("kg-0", 1, [0, 1]), _member("kg-1", 1, [2, 3])), start)
    journal.observe(_group("PreparingRebalance"), start + timedelta(seconds=2))
    journal.observe(
        _group("Stable", _member("kg-0", 2, [0, 1, 2, 3])), start + timedelta(seconds=4)
    )
    rows = [
        json.loads(line) for line in (tmp_path / "journal" / "kg.jsonl").read_text().splitlines()
    ]

    output = tmp_path / "out"
    analytics.run(spark, str(tmp_path / "journal"), output)
    [got] = [row.asDict() for row in spark.read.parquet(str(output / "windows")).collect()]
    [expected] = ref.window_figures(rows)
    assert (got["rebalances"], got["moved"], got["time_to_stable_ms"]) == (
        expected.rebalances,
        expected.moved,
        expected.time_to_stable_ms,
    )
    assert expected.rebalances == 1
    assert expected.moved == 2  # partitions 2 and 3 went from kg-1 to kg-0
