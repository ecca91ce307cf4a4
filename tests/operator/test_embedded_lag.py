"""spec.source.kafka (an embedded group's source cluster, for lag): the schema, the CEL rule
(cel-python, as test_crd.py) and the model agree; what the lag route serves from status;
the embedded coordinator's commits as lag.py reads them."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore, SystemClock
from coordinator.errors import ErrorCode
from coordinator.messages import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from coordinator.server.models import LagFigure
from staticfleet_operator.backends import committed_of
from staticfleet_operator.crd import KafkaAuthenticationType, parse_spec, validate_spec
from staticfleet_operator.crd.models import RULE_SOURCE_ONLY_EMBEDDED
from staticfleet_operator.lag import LagReading, group_lag, lag_figure
from tests.operator.test_crd import (
    MANAGED,
    Json,
    apply_defaults,
    crd,
    failing_spec_rules,
    root_schema,
    schema_errors,
    spec_schema,
    with_changes,
)
from tests.operator.test_crd_kafka import KAFKA

__all__ = ["crd", "root_schema", "spec_schema"]  # fixtures used by name

SOURCE: Json = {
    "kafka": {
        "bootstrapServers": "kafka-0.kafka:9093",
        "tls": {"trustedCertificates": [{"secretName": "cluster-ca", "certificate": "ca.crt"}]},
        "authentication": {
            "type": "scram-sha-512",
            "username": "lag-reader",
            "passwordSecret": {"secretName": "lag-reader", "password": "password"},
        },
    }
}


def test_an_embedded_group_takes_a_source_with_the_coordinator_kafka_settings(
    spec_schema: Json,
) -> None:
    spec = with_changes(MANAGED, source=SOURCE)
    assert validate_spec(spec) == []
    assert schema_errors(spec_schema, spec) == []
    assert failing_spec_rules(apply_defaults(copy.deepcopy(spec), spec_schema)) == []
    source = parse_spec(spec).source
    assert source is not None
    assert source.kafka.bootstrap_servers == "kafka-0.kafka:9093"
    auth = source.kafka.authentication
    assert auth is not None and auth.type is KafkaAuthenticationType.SCRAM_SHA_512
    assert parse_spec(MANAGED).source is None


def test_a_kafka_coordinated_group_refuses_a_source(spec_schema: Json) -> None:
    # Its lag is read from coordinator.bootstrapServers, where its commits are.
    spec = with_changes(KAFKA, source=SOURCE)
    assert RULE_SOURCE_ONLY_EMBEDDED.message in failing_spec_rules(
        apply_defaults(copy.deepcopy(spec), spec_schema)
    )
    assert any(RULE_SOURCE_ONLY_EMBEDDED.message in p for p in validate_spec(spec))


@pytest.mark.parametrize(
    ("kafka", "problem"),
    [
        ({}, "spec.source.kafka.bootstrapServers: required field is missing"),
        ({"bootstrapServers": "kafka"}, "is not host:port"),
        # The coordinator.kafka rule, inherited: tls authentication needs tls.
        (
            {
                "bootstrapServers": "k:9093",
                "authentication": {
                    "type": "tls",
                    "certificateAndKey": {
                        "secretName": "user",
                        "certificate": "user.crt",
                        "key": "user.key",
                    },
                },
            },
            "needs",
        ),
    ],
)
def test_a_bad_source_is_refused_with_its_reason(
    kafka: Json, problem: str, spec_schema: Json
) -> None:
    spec = with_changes(MANAGED, source={"kafka": kafka})
    problems = validate_spec(spec)
    assert any(problem in line for line in problems), problems
    if "bootstrapServers" in kafka and kafka["bootstrapServers"] == "kafka":
        assert schema_errors(spec_schema, spec)


def test_the_served_figure_is_status_figure() -> None:
    read_at = datetime(2026, 11, 28, 12, 0, 5, tzinfo=UTC)
    assert lag_figure("orders", 15, 1, read_at) == LagFigure(
        group_id="orders", lag=15, partitions_without_commit=1, read_at_ms=1_795_867_205_000
    )
    # Never read: nothing served (the route answers 404, not a 0 an autoscaler would act on).
    assert lag_figure("orders", None, None, None) is None
    assert lag_figure("orders", 15, 1, None) is None


def test_committed_of_leaves_out_partitions_answered_with_an_error() -> None:
    fetched = OffsetFetchResponse(
        ErrorCode.NONE,
        [
            OffsetFetchPartition("t", 0, 5, None),
            OffsetFetchPartition("t", 1, -1, None),
            OffsetFetchPartition("t", 2, 9, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ],
    )
    assert committed_of(fetched) == {("t", 0): 5, ("t", 1): -1}


async def test_the_embedded_coordinators_commits_make_the_lag() -> None:
    """The observer's embedded half: OffsetFetch (all partitions) of the embedded
    coordinator, with log ends as the source cluster would answer them."""
    coordinator = GroupCoordinator(CoordinatorConfig(), SystemClock(), MemoryStore())
    await coordinator.start()
    try:
        partitions = [OffsetCommitPartition("t", 0, 5), OffsetCommitPartition("other", 0, 3)]
        await coordinator.commit_offsets(OffsetCommitRequest("g", -1, "", None, partitions))
        fetched = await coordinator.fetch_offsets(OffsetFetchRequest("g"))
    finally:
        await coordinator.close()
    reading = LagReading(log_ends={("t", 0): 20, ("t", 1): 20}, committed=committed_of(fetched))
    lag = group_lag(reading)
    # A commit of a topic the spec does not name counts for nothing.
    assert (lag.total, lag.without_commit) == (15, 1)
