"""`staticfleet member run`: one fleet member process over HTTP.

It joins the group, consumes its assigned partitions (of the synthetic source, or of real
Kafka topics with `--source kafka://host:port`), resumes from committed offsets on
assignment, commits through the group periodically and before giving partitions away,
and writes one JSON line per ownership event (the evidence the tests and the demo use to
prove no partition was owned by two members at once). Settings come from flags or from the
environment the operator injects (`coordinator.client.env`); a flag wins.

Exit codes: 0 after SIGTERM/SIGINT and a clean close, 2 for bad settings, 3 when fenced
(another process took this group.instance.id), 1 for any other fatal error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from coordinator.client import env
from coordinator.client.config import MemberConfig, RebalanceProtocolSetting
from coordinator.client.http import HttpTransport
from coordinator.client.kafka_errors import KafkaAccessError
from coordinator.client.kafka_security import tls_context
from coordinator.client.kafka_settings import (
    PLAINTEXT_SETTINGS,
    KafkaClientSettings,
    KafkaSettingsFile,
)
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.client.listener import Partitions
from coordinator.client.member import GroupMember, MemberAccessDenied
from coordinator.client.standby import wait_for_promotion
from coordinator.client.strategy import ConfigurationError
from coordinator.client.transport import Transport, TransportError
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator.protocol import TopicPartition
from coordinator.standby import Promoted, StandbyHeartbeatRequest, StandbyHeartbeatResponse
from staticfleet.source import PartitionReader, SyntheticReader, SyntheticSource, wall_clock_ms

logger = logging.getLogger("staticfleet.member")

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_USAGE = 2
EXIT_FENCED = 3
# A Kafka cluster refused the member's access (credentials, certificates, ACLs): a retry
# cannot fix it (docs/kafka.md, "Secured clusters").
EXIT_KAFKA_ACCESS = 4

# Event kinds written to the event log, one JSON object per line.
STARTED = "started"
ASSIGNED = "assigned"
REVOKED = "revoked"
LOST = "lost"
COMMIT = "commit"
COMMIT_FAILED = "commit_failed"
FATAL = "fatal"
STOPPED = "stopped"
STANDBY = "standby"  # waiting as a hot standby
PROMOTED = "promoted"  # the standby is now `instance_id`


# --------------------------------------------------------------------------- CLI


def register(subparsers: Any) -> None:
    member = subparsers.add_parser("member", help="run a fleet member process")
    commands = member.add_subparsers(dest="member_command", required=True)
    run = commands.add_parser(
        "run",
        help="join a group and consume its partitions until SIGTERM",
        description=(
            "Join a consumer group as one member and consume its partitions of the synthetic "
            "source or of real Kafka topics (--source kafka://host:port). Every "
            "setting can come from a flag or from its STATICFLEET_* environment variable "
            "(see docs/client.md); a flag wins."
        ),
    )
    run.add_argument(
        "--coordinator-url",
        "--coordinator",
        dest="coordinator_url",
        help=(
            "coordinator base URL, http(s)://... for ours or kafka://host:port[,host:port] "
            f"for a Kafka cluster's group coordinator [{env.COORDINATOR_URL}]"
        ),
    )
    run.add_argument(
        "--kafka-config",
        metavar="FILE",
        help=(
            "Kafka client settings (.properties with librdkafka names: security.protocol, "
            "sasl.*, ssl.*) for a kafka:// coordinator and source; docs/kafka.md "
            f"[{env.KAFKA_CONFIG}] (default PLAINTEXT)"
        ),
    )
    run.add_argument("--group-id", help=f"consumer group id [{env.GROUP_ID}]")
    run.add_argument(
        "--instance-id", help=f"group.instance.id; empty for a dynamic member [{env.INSTANCE_ID}]"
    )
    run.add_argument(
        "--standby-id",
        help=(
            "run as a hot standby with this id: hold nothing until the coordinator promotes "
            f"it into a missing member's instance id (our coordinator only) [{env.STANDBY_ID}]"
        ),
    )
    run.add_argument("--topics", help=f"comma-separated topics [{env.TOPICS}]")
    run.add_argument(
        "--rebalance-protocol",
        choices=[setting.value for setting in RebalanceProtocolSetting],
        help=f"eager | compatible | cooperative [{env.REBALANCE_PROTOCOL}] (default eager)",
    )
    run.add_argument("--eager-assignor", help=f"[{env.EAGER_ASSIGNOR}] (default range)")
    run.add_argument(
        "--cooperative-assignor",
        help=f"[{env.COOPERATIVE_ASSIGNOR}] (default cooperative-sticky)",
    )
    run.add_argument("--session-timeout-ms", type=int, help=f"[{env.SESSION_TIMEOUT_MS}] (10000)")
    run.add_argument(
        "--rebalance-timeout-ms", type=int, help=f"[{env.REBALANCE_TIMEOUT_MS}] (30000)"
    )
    run.add_argument(
        "--heartbeat-interval-ms", type=int, help=f"[{env.HEARTBEAT_INTERVAL_MS}] (3000)"
    )
    run.add_argument("--token", help=f"bearer token; prefer the environment [{env.TOKEN}]")
    run.add_argument(
        "--event-log", help=f"JSON-lines event file; '-' or unset for stdout [{env.EVENT_LOG}]"
    )
    run.add_argument(
        "--leave-on-close",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send LeaveGroup on SIGTERM (default: yes for dynamic, no for static, KIP-345)",
    )
    run.add_argument(
        "--authorization-retry-ms",
        type=int,
        default=120_000,
        help="how long a refused token (HTTP 401/403, e.g. while the operator restarts) is "
        "retried before the member exits (default: %(default)s; 0: exit at once)",
    )
    run.add_argument("--client-id", default=None, help="client id reported to the coordinator")
    run.add_argument("--commit-interval-ms", type=int, default=1000)
    run.add_argument("--poll-interval-ms", type=int, default=100)
    run.add_argument(
        "--source",
        help=f"synthetic, or kafka://host:port to read real topics [{env.SOURCE}] (synthetic)",
    )
    run.add_argument(
        "--max-poll-records", type=int, default=2000, help="records read per poll at most"
    )
    run.add_argument("--records-per-second", type=float, default=10.0, help="per partition")
    run.add_argument("--retention-records", type=int, default=10_000, help="per partition")
    run.add_argument(
        "--source-epoch-ms", type=int, default=0, help="when the synthetic logs began (ms)"
    )
    run.add_argument("--log-level", default="WARNING")
    run.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = settings_from(args, os.environ)
    except (ValueError, ConfigurationError) as error:
        print(f"staticfleet member run: {error}", file=sys.stderr)
        return EXIT_USAGE
    return asyncio.run(run_member(settings))


class Settings:
    """Everything `member run` needs, resolved from flags and environment."""

    def __init__(
        self,
        *,
        url: str,
        token: str | None,
        config: MemberConfig,
        event_log: str | None,
        leave_on_close: bool | None,
        commit_interval_ms: int,
        poll_interval_ms: int,
        source: SyntheticSource,
        kafka_bootstrap: str | None = None,
        max_poll_records: int = 2000,
        standby_id: str | None = None,
        kafka_settings: KafkaClientSettings = PLAINTEXT_SETTINGS,
        kafka_settings_file: KafkaSettingsFile | None = None,
    ) -> None:
        self.url = url
        self.token = token
        self.config = config
        self.event_log = event_log
        self.leave_on_close = leave_on_close
        self.commit_interval_ms = commit_interval_ms
        self.poll_interval_ms = poll_interval_ms
        self.source = source
        # Set: read real topics from this cluster instead of the synthetic source.
        self.kafka_bootstrap = kafka_bootstrap
        self.max_poll_records = max_poll_records
        # Set: wait as a hot standby first (config.group_instance_id is None until promoted).
        self.standby_id = standby_id
        # How kafka:// connections (coordinator and source) reach the cluster; the file, when
        # given, is read again for each new coordinator connection (rotated credentials).
        self.kafka_settings = kafka_settings
        self.kafka_settings_file = kafka_settings_file


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    def pick(flag: Any, name: str) -> str | None:
        if flag is not None:
            return str(flag)
        return env.text(environ, name)

    def number(flag: int | None, name: str, default: int) -> int:
        value = pick(flag, name)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{name} must be an integer, not {value!r}") from None

    url = pick(args.coordinator_url, env.COORDINATOR_URL)
    group_id = pick(args.group_id, env.GROUP_ID)
    topics = env.split_topics(pick(args.topics, env.TOPICS) or "")
    missing = [
        name
        for name, value in (
            (env.COORDINATOR_URL, url),
            (env.GROUP_ID, group_id),
            (env.TOPICS, topics),
        )
        if not value
    ]
    if missing or url is None or group_id is None:
        raise ValueError(f"missing setting(s): {', '.join(missing)} (flag or environment)")
    protocol = pick(args.rebalance_protocol, env.REBALANCE_PROTOCOL) or "eager"
    try:
        setting = RebalanceProtocolSetting(protocol)
    except ValueError:
        raise ValueError(
            f"{env.REBALANCE_PROTOCOL} must be eager, compatible or cooperative, not {protocol!r}"
        ) from None
    instance_id = pick(args.instance_id, env.INSTANCE_ID) or None
    standby_id = pick(args.standby_id, env.STANDBY_ID) or None
    if standby_id is not None and (instance_id is not None or url.startswith("kafka://")):
        raise ValueError(
            f"{env.STANDBY_ID} needs our coordinator (not kafka://) and no {env.INSTANCE_ID}: "
            "a standby is given its instance id when it is promoted"
        )
    config = MemberConfig(
        group_id=group_id,
        topics=topics,
        group_instance_id=instance_id,
        session_timeout_ms=number(args.session_timeout_ms, env.SESSION_TIMEOUT_MS, 10_000),
        rebalance_timeout_ms=number(args.rebalance_timeout_ms, env.REBALANCE_TIMEOUT_MS, 30_000),
        heartbeat_interval_ms=number(args.heartbeat_interval_ms, env.HEARTBEAT_INTERVAL_MS, 3_000),
        rebalance_protocol=setting,
        eager_assignor=pick(args.eager_assignor, env.EAGER_ASSIGNOR) or "range",
        cooperative_assignor=(
            pick(args.cooperative_assignor, env.COOPERATIVE_ASSIGNOR) or "cooperative-sticky"
        ),
        client_id=args.client_id or f"staticfleet-member-{instance_id or os.getpid()}",
        leave_group_on_close=args.leave_on_close,
        authorization_retry_ms=args.authorization_retry_ms,
    )
    if args.commit_interval_ms <= 0 or args.poll_interval_ms <= 0 or args.max_poll_records <= 0:
        raise ValueError(
            "--commit-interval-ms, --poll-interval-ms and --max-poll-records must be positive"
        )
    source_url = pick(args.source, env.SOURCE) or "synthetic"
    kafka_bootstrap = None
    if source_url != "synthetic":
        from staticfleet.kafka.source import bootstrap_of

        kafka_bootstrap = bootstrap_of(source_url)
    kafka_settings = PLAINTEXT_SETTINGS
    kafka_settings_file: KafkaSettingsFile | None = None
    kafka_config = pick(getattr(args, "kafka_config", None), env.KAFKA_CONFIG)
    if kafka_config is not None:
        if kafka_bootstrap is None and not url.startswith("kafka://"):
            raise ValueError(
                f"--kafka-config/{env.KAFKA_CONFIG} is for kafka:// connections, but neither "
                "the coordinator nor the source is kafka://"
            )
        kafka_settings_file = KafkaSettingsFile(kafka_config)
        kafka_settings = kafka_settings_file.current()
        # Read the certificates now: a missing or unreadable file is a usage error at start,
        # not a failure at the first connection.
        tls_context(kafka_settings)
        logger.info("Kafka client settings from %s: %s", kafka_config, kafka_settings.describe())
    return Settings(
        url=url,
        token=pick(args.token, env.TOKEN),
        config=config,
        event_log=pick(args.event_log, env.EVENT_LOG),
        leave_on_close=args.leave_on_close,
        commit_interval_ms=args.commit_interval_ms,
        poll_interval_ms=args.poll_interval_ms,
        source=SyntheticSource(
            records_per_second=args.records_per_second,
            retention_records=args.retention_records,
            epoch_ms=args.source_epoch_ms,
        ),
        kafka_bootstrap=kafka_bootstrap,
        max_poll_records=args.max_poll_records,
        standby_id=standby_id,
        kafka_settings=kafka_settings,
        kafka_settings_file=kafka_settings_file,
    )


# --------------------------------------------------------------------------- event log


class EventLog:
    """One JSON object per line, flushed at once so a killed process loses nothing."""

    def __init__(self, stream: TextIO, *, group_id: str, instance_id: str | None) -> None:
        self._stream = stream
        self._group_id = group_id
        self.instance_id = instance_id
        self.member: GroupMember | None = None

    @classmethod
    def open(cls, path: str | None, *, group_id: str, instance_id: str | None) -> EventLog:
        stream: TextIO
        if path is None or path == "-":
            stream = sys.stdout
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            stream = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        return cls(stream, group_id=group_id, instance_id=instance_id)

    def write(self, event: str, **fields: Any) -> None:
        member = self.member
        line = {
            "ts_ms": wall_clock_ms(),
            "event": event,
            "group_id": self._group_id,
            "instance_id": self.instance_id,
            "member_id": member.member_id if member else "",
            "generation_id": member.generation_id if member else -1,
            **fields,
        }
        self._stream.write(json.dumps(line, sort_keys=True) + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._stream is not sys.stdout:
            self._stream.close()


def partition_list(partitions: Iterable[TopicPartition]) -> list[list[Any]]:
    return [[tp.topic, tp.partition] for tp in sorted(partitions)]


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """Parse an event log (a line cut short by a kill is skipped)."""
    events = []
    with open(path, encoding="utf-8") as stream:
        for line in stream:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


# --------------------------------------------------------------------------- the member


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
        self.member: GroupMember | None = None
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


def open_transport(
    url: str,
    token: str | None,
    client_id: str,
    kafka_settings: KafkaClientSettings | KafkaSettingsFile = PLAINTEXT_SETTINGS,
) -> Transport:
    """Our coordinator over HTTP, or a Kafka cluster's group coordinator for kafka:// URLs
    (the group and its offsets then live on the cluster)."""
    if url.startswith("kafka://"):
        return KafkaTransport(url, client_id=client_id, settings=kafka_settings)
    return HttpTransport(url, token)


async def run_member(settings: Settings, *, stop: asyncio.Event | None = None) -> int:
    config = settings.config
    events = EventLog.open(
        settings.event_log, group_id=config.group_id, instance_id=config.group_instance_id
    )
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        # Not possible off the main thread or on some platforms; the caller's stop event
        # still works there.
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    transport = open_transport(
        settings.url,
        settings.token,
        config.client_id,
        settings.kafka_settings_file or settings.kafka_settings,
    )
    reader: PartitionReader
    if settings.kafka_bootstrap is not None:
        from staticfleet.kafka.source import KafkaReader

        reader = KafkaReader(
            settings.kafka_bootstrap,
            client_id=config.client_id,
            group_id=config.group_id,
            settings=settings.kafka_settings,
        )
        # The leader assigns what the cluster has, as a Kafka consumer does.
        transport = ClusterTopicMetadata(
            transport, settings.kafka_bootstrap, config.topics, settings.kafka_settings
        )
    else:
        reader = SyntheticReader(settings.source)
    consumer = SourceConsumer(reader, events)
    promoted: Promoted | None = None
    if settings.standby_id is not None:
        exit_code = EXIT_OK
        try:
            promoted = await _wait_as_standby(settings, transport, events, stop)
        except CoordinatorError as error:
            print(f"staticfleet member run: standby refused: {error}", file=sys.stderr)
            exit_code = EXIT_FATAL
        if promoted is None:  # stopped (or refused) while still a standby: nothing to hand back
            events.write(STOPPED, consumed=0)
            await transport.close()
            reader.close()
            events.close()
            return exit_code
        config = dataclasses.replace(config, group_instance_id=promoted.instance_id)
        events.instance_id = promoted.instance_id
    try:
        member = GroupMember(transport, config, consumer)
    except ConfigurationError as error:
        print(f"staticfleet member run: {error}", file=sys.stderr)
        await transport.close()
        reader.close()
        events.close()
        return EXIT_USAGE
    consumer.member = member
    events.member = member
    events.write(
        STARTED,
        rebalance_protocol=config.rebalance_protocol.value,
        protocols=list(config.offered_assignors),
        topics=list(config.topics),
        pid=os.getpid(),
    )
    if promoted is not None:
        events.write(PROMOTED, standby_id=settings.standby_id, member_id=promoted.member_id)
    await member.start(promoted=promoted)
    try:
        code = await _consume_until_stopped(member, consumer, settings, stop)
    finally:
        # Also after a fatal error: close then skips what a fenced member must not send.
        await member.close(leave=settings.leave_on_close)
        events.write(STOPPED, consumed=consumer.consumed)
        await transport.close()
        reader.close()
        events.close()
    return code


async def _wait_as_standby(
    settings: Settings, transport: Transport, events: EventLog, stop: asyncio.Event
) -> Promoted | None:
    """Heartbeat as a standby until promoted (the promotion) or stopped (None)."""
    if not isinstance(transport, HttpTransport):
        raise CoordinatorError(ErrorCode.INVALID_REQUEST, "a standby needs our coordinator")
    config = settings.config
    events.write(STANDBY, standby_id=settings.standby_id, pid=os.getpid())
    waiting = asyncio.ensure_future(
        wait_for_promotion(
            transport,
            config.group_id,
            str(settings.standby_id),
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
        )
    )
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not waiting.done():
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        return None
    return waiting.result()


async def _consume_until_stopped(
    member: GroupMember, consumer: SourceConsumer, settings: Settings, stop: asyncio.Event
) -> int:
    fatal = asyncio.ensure_future(member.run())
    stopped = asyncio.ensure_future(stop.wait())
    poll_s = settings.poll_interval_ms / 1000
    next_commit = asyncio.get_running_loop().time() + settings.commit_interval_ms / 1000
    try:
        while not stop.is_set() and not fatal.done():
            try:
                consumed = consumer.consume_available(settings.max_poll_records)
                if asyncio.get_running_loop().time() >= next_commit:
                    await consumer.commit()
                    next_commit += settings.commit_interval_ms / 1000
            except KafkaAccessError as error:  # the source's cluster refused us
                fatal.cancel()
                return _report_access(consumer, error)
            # Records came: more may be waiting, so only yield to the member's tasks; the
            # poll interval is slept only when the source had nothing.
            busy = consumed > 0
            await asyncio.wait(
                {fatal, stopped}, timeout=0 if busy else poll_s, return_when=asyncio.FIRST_COMPLETED
            )
    finally:
        stopped.cancel()
    if fatal.done() and not fatal.cancelled() and fatal.exception() is not None:
        return _report_fatal(member, consumer)
    fatal.cancel()
    return EXIT_OK


def _report_access(consumer: SourceConsumer, error: KafkaAccessError) -> int:
    """One line naming the cause (never a secret: the errors hold none), and its exit code."""
    consumer.events.write(FATAL, reason=error.reason, message=str(error))
    print(f"staticfleet member run: fatal: {error.reason}: {error}", file=sys.stderr)
    return EXIT_KAFKA_ACCESS


def _report_fatal(member: GroupMember, consumer: SourceConsumer) -> int:
    error = member.error
    if isinstance(error, MemberAccessDenied):
        return _report_access(consumer, error.access)
    code = error.code if error is not None else ErrorCode.UNKNOWN_SERVER_ERROR
    consumer.events.write(FATAL, error_code=int(code), error=code.name, message=str(error))
    if code is ErrorCode.FENCED_INSTANCE_ID:
        print(
            f"staticfleet member run: fenced: another process now uses group.instance.id "
            f"{member.group_instance_id!r}; this one stops without touching its partitions "
            "(check for two pods with one identity)",
            file=sys.stderr,
        )
        return EXIT_FENCED
    print(f"staticfleet member run: fatal: {error}", file=sys.stderr)
    return EXIT_FATAL


class ClusterTopicMetadata:
    """A transport whose topic metadata comes from the Kafka cluster the member reads.

    The group's leader assigns the partitions the cluster has (as a Kafka consumer's leader
    does from its own metadata), so partition counts need not be repeated by hand.
    """

    def __init__(
        self,
        transport: Transport,
        bootstrap: str,
        topics: Sequence[str],
        settings: KafkaClientSettings = PLAINTEXT_SETTINGS,
    ) -> None:
        self._transport = transport
        self._bootstrap = bootstrap
        self._topics = tuple(topics)
        self._settings = settings

    async def topic_metadata(self) -> dict[str, int]:
        from staticfleet.kafka.source import partition_counts

        return await asyncio.to_thread(
            partition_counts, self._bootstrap, self._topics, settings=self._settings
        )

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        return await self._transport.join_group(request)

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        return await self._transport.sync_group(request)

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        return await self._transport.heartbeat(request)

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        return await self._transport.leave_group(request)

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        return await self._transport.commit_offsets(request)

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        return await self._transport.fetch_offsets(request)

    async def standby_heartbeat(self, request: StandbyHeartbeatRequest) -> StandbyHeartbeatResponse:
        return await self._transport.standby_heartbeat(request)

    async def close(self) -> None:
        await self._transport.close()
