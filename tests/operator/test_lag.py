"""Lag: the pure computation (lag.py), its poll decision, the plan writing it into status and
gauges, and the metrics' series with the per-partition flag off and on."""

from __future__ import annotations

from datetime import timedelta

import pytest

from staticfleet_operator.lag import (
    LAG_INTERVAL_SECONDS,
    GroupLag,
    LagReading,
    PartitionLag,
    group_lag,
    lag_due,
    seconds_until_lag_due,
)
from staticfleet_operator.metrics import OperatorMetrics
from tests.operator.test_pass_plan import NOW, group, kafka_spec, plan, spec_body

T = "orders"


@pytest.mark.parametrize(
    ("log_end", "committed", "lag", "without_commit"),
    [
        pytest.param(10, 4, 6, 0, id="commits-behind"),
        pytest.param(10, 10, 0, 0, id="caught-up"),
        pytest.param(10, None, 0, 1, id="no-commit-counts-0-and-is-reported"),
        pytest.param(10, -1, 0, 1, id="offset-fetch-minus-1-is-no-commit"),
        pytest.param(0, None, 0, 1, id="log-end-0-no-commit"),
        pytest.param(0, 0, 0, 0, id="log-end-0-committed-0"),
        pytest.param(5, 8, 0, 0, id="commit-past-a-truncated-log-is-never-negative"),
    ],
)
def test_one_partition(log_end: int, committed: int | None, lag: int, without_commit: int) -> None:
    commits = {} if committed is None else {(T, 0): committed}
    result = group_lag(LagReading(log_ends={(T, 0): log_end}, committed=commits))
    assert (result.total, result.without_commit) == (lag, without_commit)
    stored = None if committed is None or committed < 0 else committed
    assert result.partitions == (PartitionLag(T, 0, log_end, stored, lag),)


def test_a_partition_the_group_does_not_read_counts_for_nothing() -> None:
    # Commits of a topic out of the spec (no log end read for it) are ignored.
    reading = LagReading(
        log_ends={(T, 0): 10, (T, 1): 7},
        committed={(T, 0): 3, (T, 1): 7, ("old-topic", 0): 0, (T, 9): 0},
    )
    assert group_lag(reading) == GroupLag(
        total=7,
        without_commit=0,
        partitions=(PartitionLag(T, 0, 10, 3, 7), PartitionLag(T, 1, 7, 7, 0)),
    )


def test_no_partitions_no_lag() -> None:
    assert group_lag(LagReading({}, {})) == GroupLag(0, 0, ())


@pytest.mark.parametrize(
    ("age", "due"),
    [(None, True), (0.0, False), (LAG_INTERVAL_SECONDS - 0.5, False), (LAG_INTERVAL_SECONDS, True)],
)
def test_lag_is_read_at_most_every_interval(age: float | None, due: bool) -> None:
    last = None if age is None else NOW - timedelta(seconds=age)
    assert lag_due(last, NOW) is due


# --- the plan --------------------------------------------------------------------------------

READING = LagReading(log_ends={(T, 0): 10, (T, 1): 10, (T, 2): 10}, committed={(T, 0): 4})


def test_a_reading_goes_into_status_with_its_time_and_into_the_gauges() -> None:
    result = plan(group(kafka_spec(), lag=READING))
    assert result.status is not None and result.gauges is not None
    assert (result.status.lag, result.status.lag_partitions_without_commit) == (6, 2)
    assert result.status.lag_time == NOW
    assert result.gauges.lag == 6
    assert [row.lag for row in result.gauges.lag_partitions] == [6, 0, 0]


def test_a_pass_without_a_reading_keeps_the_last_figure_and_its_age() -> None:
    earlier = (NOW - timedelta(seconds=40)).isoformat()
    status = {"lag": 12, "lagPartitionsWithoutCommit": 1, "lagTime": earlier}
    result = plan(group(kafka_spec(), status=status))  # not due, or the read failed
    assert result.status is not None and result.gauges is not None
    assert result.status.lag == 12
    assert result.status.lag_time == NOW - timedelta(seconds=40)
    assert (result.gauges.lag, result.gauges.lag_partitions) == (12, ())


def test_an_unchanged_reading_leaves_status_alone_and_is_remembered() -> None:
    earlier = (NOW - timedelta(seconds=40)).isoformat()
    # The figures READING gives (6 records behind, 2 partitions without a commit).
    status = {"lag": 6, "lagPartitionsWithoutCommit": 2, "lagTime": earlier}
    result = plan(group(kafka_spec(), status=status, lag=READING))
    assert result.status is not None and result.gauges is not None
    # Same figures: lagTime stays (no status write for a new timestamp), the gauges refresh,
    # and memory says when the read was, so the next one is due 15 s after it.
    assert result.status.lag_time == NOW - timedelta(seconds=40)
    assert result.gauges.lag == 6 and result.remember.lag_read == NOW
    moved = plan(group(kafka_spec(), status={**status, "lag": 7}, lag=READING))
    assert moved.status is not None and moved.status.lag_time == NOW
    unread = plan(group(kafka_spec(), status=status))
    assert unread.remember.lag_read is None


def test_a_failed_read_keeps_the_figure_and_waits_an_interval_to_try_again() -> None:
    """A cluster that does not answer costs one request timeout per interval, not one per
    pass (an embedded group's passes would otherwise each wait on its source cluster)."""
    earlier = (NOW - timedelta(seconds=40)).isoformat()
    status = {"lag": 12, "lagPartitionsWithoutCommit": 1, "lagTime": earlier}
    result = plan(group(kafka_spec(), status=status, lag_tried=True))
    assert result.status is not None and result.status.lag == 12
    assert result.status.lag_time == NOW - timedelta(seconds=40)
    assert result.remember.lag_read == NOW


def test_an_embedded_group_without_a_reading_has_no_lag() -> None:
    result = plan(group())
    assert result.status is not None and result.gauges is not None
    assert (result.status.lag, result.gauges.lag) == (None, None)


def test_an_embedded_groups_reading_goes_into_status_and_the_gauges() -> None:
    spec = spec_body(
        topics=[{"name": T, "partitions": 3}], source={"kafka": {"bootstrapServers": "k:9092"}}
    )
    result = plan(group(spec, lag=READING))
    assert result.status is not None and result.gauges is not None
    assert (result.status.lag, result.status.lag_partitions_without_commit) == (6, 2)
    assert result.gauges.lag == 6 and result.remember.lag_read == NOW


def test_an_embedded_group_with_a_source_asks_for_a_pass_when_its_lag_is_due() -> None:
    """Nothing tells the operator that a source's logs grew, so a settled embedded group
    with spec.source gets a timer for its next read (else a burst would reach the lag
    route, and KEDA, only at the resync); one without spec.source gets none."""
    spec = spec_body(
        topics=[{"name": T, "partitions": 3}], source={"kafka": {"bootstrapServers": "k:9092"}}
    )
    read_now = plan(group(spec, lag=READING))
    assert read_now.wake_in == LAG_INTERVAL_SECONDS
    earlier = (NOW - timedelta(seconds=10)).isoformat()
    status = {"lag": 6, "lagPartitionsWithoutCommit": 0, "lagTime": earlier}
    read_before = plan(group(spec, status=status))
    assert read_before.wake_in == LAG_INTERVAL_SECONDS - 10
    # Without spec.source only the expected members' deadline wakes this new group.
    assert plan(group(status=status)).wake_in != LAG_INTERVAL_SECONDS - 10


@pytest.mark.parametrize(
    ("age", "seconds"),
    [(None, 0.0), (0.0, LAG_INTERVAL_SECONDS), (10.0, LAG_INTERVAL_SECONDS - 10), (99.0, 0.0)],
)
def test_seconds_until_the_next_read(age: float | None, seconds: float) -> None:
    last = None if age is None else NOW - timedelta(seconds=age)
    assert seconds_until_lag_due(last, NOW) == seconds


# --- metrics ---------------------------------------------------------------------------------

GAUGE = "staticfleet_operator_group_lag"
PARTITION = "staticfleet_operator_group_partition_lag"
LABELS = {"namespace": "default", "group": "orders"}


def observe(metrics: OperatorMetrics, lag: int | None, rows: tuple[PartitionLag, ...]) -> None:
    metrics.observe_group(
        "default", "orders", desired=1, ready=1, slots=1, phase="Idle", lag=lag, lag_partitions=rows
    )


ROWS = group_lag(READING).partitions


@pytest.mark.parametrize("partition_lag", [False, True])
def test_total_always_per_partition_only_behind_the_flag(partition_lag: bool) -> None:
    metrics = OperatorMetrics(partition_lag=partition_lag)
    sample = metrics.registry.get_sample_value
    observe(metrics, None, ())
    assert sample(GAUGE, LABELS) is None  # never read: no series, not a false 0
    observe(metrics, 6, ROWS)
    assert sample(GAUGE, LABELS) == 6
    p0 = sample(PARTITION, {**LABELS, "topic": T, "partition": "0"})
    p1 = sample(PARTITION, {**LABELS, "topic": T, "partition": "1"})
    if partition_lag:
        assert p0 == 6
        assert p1 is None  # no commit: no series
    else:
        assert (p0, p1) == (None, None)
    metrics.forget_group("default", "orders")
    assert sample(GAUGE, LABELS) is None
    assert sample(PARTITION, {**LABELS, "topic": T, "partition": "0"}) is None


@pytest.mark.parametrize(("argv", "on"), [([], False), (["--partition-lag-metrics"], True)])
def test_the_operator_flag_reaches_its_options(argv: list[str], on: bool) -> None:
    from staticfleet.cli import build_parser
    from staticfleet.commands.operator_cmd import options_from_args

    args = build_parser().parse_args(["operator", "run", *argv])
    assert options_from_args(args).partition_lag_metrics is on
