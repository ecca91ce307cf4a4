"""The synthetic source (ownership analysis of event logs: tests/demo/test_ownership.py)."""

from __future__ import annotations

from coordinator.protocol import TopicPartition
from staticfleet.source import SyntheticReader, SyntheticSource

TP = TopicPartition("t", 0)


class FakeClock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def test_records_are_deterministic_and_the_log_grows_with_time():
    clock = FakeClock(10_000)
    source = SyntheticSource(records_per_second=10, retention_records=50, clock_ms=clock)
    other = SyntheticSource(records_per_second=10, retention_records=50, clock_ms=clock)
    end = source.end_offset(TP)
    assert 100 <= end <= 101
    assert source.start_offset(TP) == end - 50
    assert source.record(TP, 7) == other.record(TP, 7)
    assert source.record(TP, 7) != source.record(TP, 8)
    assert source.record(TopicPartition("t", 1), 7).value != source.record(TP, 7).value

    clock.now_ms += 1_000
    assert source.end_offset(TP) == end + 10
    records = source.read(TP, 0, max_records=5)
    assert [r.offset for r in records] == list(
        range(source.start_offset(TP), source.start_offset(TP) + 5)
    )
    tail = source.read(TP, source.end_offset(TP) - 3)
    assert [r.offset for r in tail] == [source.end_offset(TP) - 3 + i for i in range(3)]
    assert source.read(TP, source.end_offset(TP)) == []


def test_the_synthetic_reader_reads_what_is_assigned_from_where_it_is_told():
    clock = FakeClock(10_000)  # 100 records per partition so far
    source = SyntheticSource(records_per_second=10, retention_records=50, clock_ms=clock)
    reader = SyntheticReader(source)
    other = TopicPartition("t", 1)
    reader.assign({TP: 90, other: None})  # None: the oldest retained record
    records = reader.poll(max_records=1000)
    offsets = {(r.partition, r.offset) for r in records}
    assert {offset for partition, offset in offsets if partition == 0} == set(range(90, 100))
    assert min(offset for partition, offset in offsets if partition == 1) == source.start_offset(
        other
    )
    assert reader.poll(max_records=1000) == []

    reader.unassign([TP])
    clock.now_ms += 1_000
    assert {r.partition for r in reader.poll(max_records=1000)} == {1}
