"""`run_member`: join the group, consume until stopped, close cleanly; and its exit codes.

The member resumes from committed offsets on assignment, commits through the group
periodically and before giving partitions away, and writes every ownership event to its
event log (`staticfleet.member.events`).

Exit codes: 0 after SIGTERM/SIGINT (or the caller's stop event) and a clean close, 2 for
bad settings, 3 when fenced (another process took this group.instance.id; on the consumer
protocol, the broker still holds it: UNRELEASED_INSTANCE_ID), 4 when a Kafka
cluster refused access or the member refused the coordinator's certificate, 1 for any other
fatal error.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import ssl
import sys
from collections.abc import Awaitable
from typing import Any

from coordinator.client import env
from coordinator.client.access import AccessError
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.client.consumer_protocol_member import (
    ConsumerProtocolError,
    ConsumerProtocolMember,
)
from coordinator.client.http import HttpTransport
from coordinator.client.kafka_errors import KafkaAccessError
from coordinator.client.kafka_settings import (
    DEFAULT_REQUEST_TIMEOUT_MS as KAFKA_REQUEST_TIMEOUT_MS,
)
from coordinator.client.kafka_settings import (
    PLAINTEXT_SETTINGS,
    KafkaClientSettings,
    KafkaSettingsFile,
)
from coordinator.client.member import GroupMember, MemberAccessDenied
from coordinator.client.standby import wait_for_promotion
from coordinator.client.strategy import ConfigurationError
from coordinator.client.timing import MonotonicClock
from coordinator.client.token_file import TokenFile
from coordinator.client.transport import Transport
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.standby import Promoted
from staticfleet.member.cluster_metadata import ClusterTopicMetadata
from staticfleet.member.events import (
    FATAL,
    PROMOTED,
    STANDBY,
    STARTED,
    STOPPED,
    EventLog,
    Member,
)
from staticfleet.member.health import HealthState, stall_limit_ms
from staticfleet.member.health_server import HealthServer
from staticfleet.member.settings import Settings
from staticfleet.member.source_consumer import SourceConsumer
from staticfleet.source import PartitionReader, SyntheticReader

logger = logging.getLogger("staticfleet.member")

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_USAGE = 2
EXIT_FENCED = 3
# A Kafka cluster refused the member's access (credentials, certificates, ACLs), or the member
# refused our coordinator's certificate: a retry cannot fix it (docs/kafka.md, "Secured
# clusters"; docs/server.md, "TLS").
EXIT_KAFKA_ACCESS = 4


def open_transport(
    url: str,
    token: str | TokenFile | None,
    client_id: str,
    kafka_settings: KafkaClientSettings | KafkaSettingsFile = PLAINTEXT_SETTINGS,
    coordinator_ssl: ssl.SSLContext | None = None,
) -> Transport:
    """Our coordinator over HTTP(S), or a Kafka cluster's group coordinator for kafka:// URLs
    (the group and its offsets then live on the cluster)."""
    if url.startswith("kafka://"):
        # Imported here: the Kafka protocol (kafka-python) costs a member on our coordinator
        # about 0.2 CPU-s of imports at every start (bench/process_start.py).
        from coordinator.client.kafka_transport import KafkaTransport

        return KafkaTransport(url, client_id=client_id, settings=kafka_settings)
    return HttpTransport(url, token, ssl_context=coordinator_ssl)


async def run_member(settings: Settings, *, stop: asyncio.Event | None = None) -> int:
    config = settings.config
    consumer_protocol = config.rebalance_protocol is RebalanceProtocolSetting.CONSUMER
    health = HealthState(
        MonotonicClock(),  # the members' own clock: their contact times compare with it
        stall_limit_ms=stall_limit_ms(
            config.session_timeout_ms,
            settings.poll_interval_ms,
            # The consumer protocol's commit waits for its request timeout, not the session.
            KAFKA_REQUEST_TIMEOUT_MS if consumer_protocol else None,
        ),
        session_timeout_ms=config.session_timeout_ms,
    )
    server: HealthServer | None = None
    if settings.health_port:
        server = HealthServer(health, settings.health_port)
        try:
            server.start()
        except OSError as error:
            print(
                f"staticfleet member run: --health-port {settings.health_port}: {error}",
                file=sys.stderr,
            )
            return EXIT_USAGE
    try:
        return await _run_member(settings, health, stop)
    finally:
        if server is not None:
            server.stop()


async def _run_member(settings: Settings, health: HealthState, stop: asyncio.Event | None) -> int:
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
        settings.coordinator_ssl,
    )
    kafka_transport = transport  # unwrapped: the consumer protocol needs its own requests
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
            promoted = await _wait_as_standby(settings, transport, events, stop, health)
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
    member: Member
    try:
        if config.rebalance_protocol is RebalanceProtocolSetting.CONSUMER:
            from coordinator.client.kafka_transport import KafkaTransport  # see open_transport

            if not isinstance(kafka_transport, KafkaTransport):  # settings_from refuses it
                raise ConfigurationError("the consumer protocol needs a kafka:// coordinator")
            member = ConsumerProtocolMember(
                kafka_transport,
                config,
                consumer,
                remote_assignor=settings.remote_assignor,
                standby=settings.standby_wait,
            )
        else:
            member = GroupMember(transport, config, consumer)
    except ConfigurationError as error:
        print(f"staticfleet member run: {error}", file=sys.stderr)
        await transport.close()
        reader.close()
        events.close()
        return EXIT_USAGE
    consumer.member = member
    events.member = member
    health.member = member
    events.write(
        STARTED,
        rebalance_protocol=config.rebalance_protocol.value,
        # On the consumer protocol the broker assigns: no classic assignor is offered.
        protocols=[]
        if isinstance(member, ConsumerProtocolMember)
        else list(config.offered_assignors),
        remote_assignor=settings.remote_assignor,
        topics=list(config.topics),
        pid=os.getpid(),
    )
    if promoted is not None:
        events.write(PROMOTED, standby_id=settings.standby_id, member_id=promoted.member_id)
    await member.start(promoted=promoted)
    try:
        code = await _consume_until_stopped(member, consumer, settings, stop, health)
    finally:
        # Also after a fatal error: close then skips what a fenced member must not send.
        await close_member(member, consumer, settings)
        events.write(STOPPED, consumed=consumer.consumed)
        await transport.close()
        reader.close()
        events.close()
    return code


async def _wait_as_standby(
    settings: Settings,
    transport: Transport,
    events: EventLog,
    stop: asyncio.Event,
    health: HealthState,
) -> Promoted | None:
    """Heartbeat as a standby until promoted (the promotion) or stopped (None); the wait
    ticks `health` every poll interval, as the run loop does."""
    if not isinstance(transport, HttpTransport):
        raise CoordinatorError(ErrorCode.INVALID_REQUEST, "a standby needs our coordinator")
    config = settings.config
    events.write(STANDBY, standby_id=settings.standby_id, pid=os.getpid())
    health.standby = True
    waiting = asyncio.ensure_future(
        wait_for_promotion(
            transport,
            config.group_id,
            str(settings.standby_id),
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            on_answer=health.standby_answered,
        )
    )
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while not (waiting.done() or stopped.done()):
            health.tick()
            await asyncio.wait(
                {waiting, stopped},
                timeout=settings.poll_interval_ms / 1000,
                return_when=asyncio.FIRST_COMPLETED,
            )
    finally:
        stopped.cancel()
        health.standby = False
    if not waiting.done():
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        return None
    return waiting.result()


async def _consume_until_stopped(
    member: Member,
    consumer: SourceConsumer,
    settings: Settings,
    stop: asyncio.Event,
    health: HealthState,
) -> int:
    fatal = asyncio.ensure_future(member.run())
    stopped = asyncio.ensure_future(stop.wait())
    poll_s = settings.poll_interval_ms / 1000
    next_commit = asyncio.get_running_loop().time() + settings.commit_interval_ms / 1000
    try:
        while not stop.is_set() and not fatal.done():
            health.tick()
            try:
                # A session that lapsed while this loop could not run (a stop, a stall) may
                # have given the partitions away: lose them before touching another record.
                await member.lose_partitions_if_session_expired()
                consumed = consumer.consume_available(settings.max_poll_records)
                if consumed and settings.ms_per_record:
                    # Awaited, so heartbeats and a rebalance's callbacks go on meanwhile.
                    await asyncio.sleep(consumed * settings.ms_per_record / 1000)
                if asyncio.get_running_loop().time() >= next_commit:
                    if not await _unless_stopped(consumer.commit(), stopped):
                        break
                    next_commit = next_commit_deadline(
                        next_commit,
                        asyncio.get_running_loop().time(),
                        settings.commit_interval_ms / 1000,
                    )
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


async def _unless_stopped(work: Awaitable[None], stopped: asyncio.Future[Any]) -> bool:
    """Await `work` unless a stop comes first; then it is cancelled (False). A stop must not
    wait on a periodic commit: a coordinator that accepted the request and does not answer
    would hold it for the session timeout, past the pod's grace period, and the kubelet's
    SIGKILL would come before the revoke. The close commits again, within its own bound."""
    task = asyncio.ensure_future(work)
    began = asyncio.get_running_loop().time()
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # its error, if any, is the caller's
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    logger.warning(
        "stopped during a commit unanswered for %.1f s: not waited for (the close commits)",
        asyncio.get_running_loop().time() - began,
    )
    return False


async def close_member(member: Member, consumer: SourceConsumer, settings: Settings) -> None:
    """Close `member` within the close timeout (Kafka's `close(Duration)`). Past it the close
    (the revoke's commit, a LeaveGroup) is abandoned and what the member still owns is dropped
    uncommitted, as lost: a stopping pod ends of itself, with its event log saying what it
    held, instead of being killed mid-request at the end of its grace period."""
    timeout_s = settings.close_timeout_ms / 1000
    try:
        await asyncio.wait_for(member.close(leave=settings.leave_on_close), timeout_s)
    except TimeoutError:
        # The revoke may have finished and a LeaveGroup hung: then nothing is held any more.
        held = sorted(f"{tp.topic}-{tp.partition}" for tp in consumer.owned)
        print(
            f"staticfleet member run: close not done within {settings.close_timeout_ms} ms "
            f"({env.CLOSE_TIMEOUT_MS}): the coordinator did not answer; "
            + (f"partitions {', '.join(held)} given up uncommitted" if held else "nothing held"),
            file=sys.stderr,
        )
        consumer.abandon()


def next_commit_deadline(due: float, now: float, interval: float) -> float:
    """When to commit next after the commit due at `due` ran at `now`: one interval later,
    or one interval from now for a loop that fell behind (a stall, a slow commit): one
    commit covers the missed ticks, which are never caught up in a burst."""
    following = due + interval
    return following if following > now else now + interval


def _report_access(consumer: SourceConsumer, error: AccessError) -> int:
    """One line naming the cause (never a secret: the errors hold none), and its exit code."""
    consumer.events.write(FATAL, reason=error.reason, message=str(error))
    print(f"staticfleet member run: fatal: {error.reason}: {error}", file=sys.stderr)
    return EXIT_KAFKA_ACCESS


def _report_fatal(member: Member, consumer: SourceConsumer) -> int:
    error = member.error
    if isinstance(error, MemberAccessDenied):
        return _report_access(consumer, error.access)
    if isinstance(error, ConsumerProtocolError) and error.unreleased_instance_id:
        consumer.events.write(FATAL, kafka_error_code=error.kafka_code, message=str(error))
        print(f"staticfleet member run: refused: UNRELEASED_INSTANCE_ID: {error}", file=sys.stderr)
        return EXIT_FENCED
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
