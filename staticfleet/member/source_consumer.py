"""The member's rebalance listener: it consumes the owned partitions and commits them."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from coordinator.client.listener import Partitions
from coordinator.client.transport import TransportError
from coordinator.errors import CoordinatorError
from coordinator.protocol import TopicPartition
from staticfleet.member.events import (
    ASSIGNED,
    COMMIT,
    COMMIT_FAILED,
    LOST,
    REVOKED,
    EventLog,
    Member,
    partition_list,
)
from staticfleet.source import PartitionReader

logger = logging.getLogger("staticfleet.member")


class SourceConsumer:
    """Consumes the owned partitions and keeps the offsets honest across rebalances.

    It is the member's rebalance listener: reading starts from the committed offset when
    a partition is assigned; on revoke the position is committed, then the partition is
    handed back (unassigned from the reader); a lost partition is dropped uncommitted.
    `positions` holds the next offset to process of each owned partition read so far.
    """

    def __init__(self, reader: PartitionReader, events: EventLog) -> None:
        self.reader = reader
        self.events = events
        self.member: Member | None = None
        self.positions: dict[TopicPartition, int] = {}
        self.owned: set[TopicPartition] = set()
        self.consumed = 0

    async def on_partitions_assigned(self, partitions: Partitions) -> None:
        self.events.write(ASSIGNED, partitions=partition_list(partitions))
        if not partitions or self.member is None:
            return
        try:
            committed = await self.member.fetch_committed(partitions)
        except (CoordinatorError, TransportError) as error:
            logger.warning("could not fetch committed offsets, starting at log start: %s", error)
            committed = {}
        for tp in partitions:
            if tp in committed:
                self.positions[tp] = committed[tp]
        self.owned.update(partitions)
        self.reader.assign({tp: committed.get(tp) for tp in partitions})

    async def on_partitions_revoked(self, partitions: Partitions) -> None:
        await self.commit(partitions)
        self._drop(partitions)
        self.events.write(REVOKED, partitions=partition_list(partitions))

    def on_partitions_lost(self, partitions: Partitions) -> None:
        # Someone else may own these already: drop them without committing.
        self._drop(partitions)
        self.events.write(LOST, partitions=partition_list(partitions))

    def abandon(self) -> None:
        """Give up whatever is still owned, uncommitted: a close that could not finish (the
        member stops now). Logged as lost, as its next owner may reprocess from the last
        commit."""
        if self.owned:
            self.on_partitions_lost(frozenset(self.owned))

    def _drop(self, partitions: Partitions) -> None:
        self.reader.unassign(partitions)
        self.owned.difference_update(partitions)
        for tp in partitions:
            self.positions.pop(tp, None)

    def consume_available(self, max_records: int = 2000) -> int:
        """Process what has arrived on the owned partitions (no await: no rebalance can
        interleave, so a revoked partition is never advanced after its commit)."""
        total = 0
        for record in self.reader.poll(max_records):
            tp = TopicPartition(record.topic, record.partition)
            # A record of a partition handed away, or one already processed, is skipped.
            if tp not in self.owned or record.offset < self.positions.get(tp, 0):
                continue
            self.positions[tp] = record.offset + 1
            total += 1
        self.consumed += total
        return total

    async def commit(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        if self.member is None:
            return
        wanted = self.positions.keys() if partitions is None else partitions
        offsets = {tp: self.positions[tp] for tp in wanted if tp in self.positions}
        if not offsets:
            return
        try:
            await self.member.commit(offsets)
        except (CoordinatorError, TransportError) as error:
            self.events.write(COMMIT_FAILED, error=str(error), partitions=partition_list(offsets))
            return
        self.events.write(
            COMMIT,
            offsets=[[tp.topic, tp.partition, offset] for tp, offset in sorted(offsets.items())],
        )
