"""What a member process needs, resolved from given values and the environment.

`settings_from` takes `Overrides` (a CLI's flags, or values a caller sets in code) and the
`STATICFLEET_*` environment the operator injects (`coordinator.client.env`, docs/client.md);
a given value wins over the environment, which wins over the default.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import ssl
from collections.abc import Mapping
from pathlib import Path

from coordinator.client import env
from coordinator.client.config import MemberConfig, RebalanceProtocolSetting
from coordinator.client.consumer_protocol_state import InstanceIdWait
from coordinator.client.coordinator_tls import CoordinatorTlsConfigError, client_context
from coordinator.client.kafka_settings import (
    PLAINTEXT_SETTINGS,
    KafkaClientSettings,
    KafkaSettingsFile,
)
from coordinator.client.token_file import TokenFile, TokenFileError
from staticfleet.source import SyntheticSource

logger = logging.getLogger("staticfleet.member")


@dataclasses.dataclass(frozen=True)
class Overrides:
    """Values given to the member (flags, or code); None: the environment's, else the default.

    Fields with a non-None default have no environment variable.
    """

    coordinator_url: str | None = None
    coordinator_ca_file: str | None = None
    kafka_config: str | None = None
    group_id: str | None = None
    instance_id: str | None = None
    standby_id: str | None = None
    standby_wait_ms: int | None = None
    standby_retry_ms: int = 150
    topics: str | None = None  # comma-separated
    rebalance_protocol: str | None = None
    remote_assignor: str | None = None
    eager_assignor: str | None = None
    cooperative_assignor: str | None = None
    session_timeout_ms: int | None = None
    rebalance_timeout_ms: int | None = None
    heartbeat_interval_ms: int | None = None
    token: str | None = None
    token_file: str | None = None
    event_log: str | None = None
    # None: LeaveGroup on close for a dynamic member, not for a static one (KIP-345).
    leave_on_close: bool | None = None
    source: str | None = None
    client_id: str | None = None
    health_port: int | None = None  # 0: no health endpoints
    close_timeout_ms: int | None = None
    authorization_retry_ms: int = 120_000
    commit_interval_ms: int = 1000
    poll_interval_ms: int = 100
    max_poll_records: int = 2000
    # A fixed cost per record read, spent before the next poll: a stand-in for the work a
    # real consumer does, so a burst builds lag that only more members drain (e2e 9e).
    ms_per_record: float = 0.0
    records_per_second: float = 10.0  # synthetic source, per partition
    retention_records: int = 10_000  # synthetic source, per partition
    source_epoch_ms: int = 0  # when the synthetic logs began


DEFAULTS = Overrides()
# KafkaConsumer.close()'s default timeout.
DEFAULT_CLOSE_TIMEOUT_MS = 30_000


class Settings:
    """Everything a member process needs, resolved (`settings_from`)."""

    def __init__(
        self,
        *,
        url: str,
        token: str | TokenFile | None,
        config: MemberConfig,
        event_log: str | None,
        leave_on_close: bool | None,
        commit_interval_ms: int,
        poll_interval_ms: int,
        source: SyntheticSource,
        kafka_bootstrap: str | None = None,
        max_poll_records: int = 2000,
        ms_per_record: float = 0.0,
        standby_id: str | None = None,
        kafka_settings: KafkaClientSettings = PLAINTEXT_SETTINGS,
        kafka_settings_file: KafkaSettingsFile | None = None,
        coordinator_ssl: ssl.SSLContext | None = None,
        remote_assignor: str | None = None,
        standby_wait: InstanceIdWait | None = None,
        health_port: int = 0,
        close_timeout_ms: int = DEFAULT_CLOSE_TIMEOUT_MS,
    ) -> None:
        self.url = url
        # How an https:// coordinator's certificate is verified (None: plain http://).
        self.coordinator_ssl = coordinator_ssl
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
        self.ms_per_record = ms_per_record
        # Set: wait as a hot standby first (config.group_instance_id is None until promoted).
        self.standby_id = standby_id
        # How kafka:// connections (coordinator and source) reach the cluster; the file, when
        # given, is read again for each new coordinator connection (rotated credentials).
        self.kafka_settings = kafka_settings
        self.kafka_settings_file = kafka_settings_file
        # The broker's assignor on the consumer protocol (None: the broker's default).
        self.remote_assignor = remote_assignor
        # Set: a standby for config.group_instance_id on the consumer protocol (it joins
        # again while the broker still holds the id).
        self.standby_wait = standby_wait
        # /livez and /readyz on this port (staticfleet.member.health); 0: none.
        self.health_port = health_port
        # The longest a stop may spend closing (runtime.close_member).
        self.close_timeout_ms = close_timeout_ms


def settings_from(given: Overrides, environ: Mapping[str, str]) -> Settings:
    """Resolve the settings; ValueError (or ConfigurationError) names what is wrong."""

    def pick(value: object, name: str) -> str | None:
        if value is not None:
            return str(value)
        return env.text(environ, name)

    def number(value: int | None, name: str, default: int) -> int:
        text = pick(value, name)
        if text is None:
            return default
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{name} must be an integer, not {text!r}") from None

    url = pick(given.coordinator_url, env.COORDINATOR_URL)
    group_id = pick(given.group_id, env.GROUP_ID)
    topics = env.split_topics(pick(given.topics, env.TOPICS) or "")
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
    protocol = pick(given.rebalance_protocol, env.REBALANCE_PROTOCOL) or "eager"
    try:
        setting = RebalanceProtocolSetting(protocol)
    except ValueError:
        raise ValueError(
            f"{env.REBALANCE_PROTOCOL} must be eager, compatible, cooperative or consumer, "
            f"not {protocol!r}"
        ) from None
    remote_assignor = pick(given.remote_assignor, env.REMOTE_ASSIGNOR)
    if setting is RebalanceProtocolSetting.CONSUMER and not url.startswith("kafka://"):
        raise ValueError(
            f"{env.REBALANCE_PROTOCOL}=consumer (KIP-848's consumer group protocol) needs a "
            f"Kafka cluster as the coordinator (kafka://...), not {url!r}: our coordinator "
            "speaks the classic protocol (eager, compatible or cooperative)"
        )
    if remote_assignor is not None and setting is not RebalanceProtocolSetting.CONSUMER:
        raise ValueError(
            f"--remote-assignor/{env.REMOTE_ASSIGNOR} is for the consumer protocol "
            f"({env.REBALANCE_PROTOCOL}=consumer), not {setting.value}"
        )
    instance_id = pick(given.instance_id, env.INSTANCE_ID) or None
    standby_id = pick(given.standby_id, env.STANDBY_ID) or None
    if standby_id is not None and (instance_id is not None or url.startswith("kafka://")):
        raise ValueError(
            f"{env.STANDBY_ID} needs our coordinator (not kafka://) and no {env.INSTANCE_ID}: "
            "a standby is given its instance id when it is promoted"
        )
    standby_wait: InstanceIdWait | None = None
    wait_ms = number(given.standby_wait_ms, env.STANDBY_WAIT_MS, 0)
    if wait_ms < 0 or given.standby_retry_ms <= 0:
        raise ValueError("--standby-wait-ms and --standby-retry-ms must be positive")
    if wait_ms:
        if setting is not RebalanceProtocolSetting.CONSUMER or instance_id is None:
            raise ValueError(
                f"--standby-wait-ms/{env.STANDBY_WAIT_MS} is for a static member on the consumer "
                f"protocol ({env.REBALANCE_PROTOCOL}=consumer and {env.INSTANCE_ID}): it waits "
                "for the broker to release that instance id"
            )
        standby_wait = InstanceIdWait(limit_ms=wait_ms, retry_ms=given.standby_retry_ms)
    config = MemberConfig(
        group_id=group_id,
        topics=topics,
        group_instance_id=instance_id,
        session_timeout_ms=number(given.session_timeout_ms, env.SESSION_TIMEOUT_MS, 10_000),
        rebalance_timeout_ms=number(given.rebalance_timeout_ms, env.REBALANCE_TIMEOUT_MS, 30_000),
        heartbeat_interval_ms=number(given.heartbeat_interval_ms, env.HEARTBEAT_INTERVAL_MS, 3_000),
        rebalance_protocol=setting,
        eager_assignor=pick(given.eager_assignor, env.EAGER_ASSIGNOR) or "range",
        cooperative_assignor=(
            pick(given.cooperative_assignor, env.COOPERATIVE_ASSIGNOR) or "cooperative-sticky"
        ),
        client_id=(
            pick(given.client_id, env.CLIENT_ID)
            or f"staticfleet-member-{instance_id or os.getpid()}"
        ),
        leave_group_on_close=given.leave_on_close,
        authorization_retry_ms=given.authorization_retry_ms,
    )
    if given.commit_interval_ms <= 0 or given.poll_interval_ms <= 0 or given.max_poll_records <= 0:
        raise ValueError(
            "--commit-interval-ms, --poll-interval-ms and --max-poll-records must be positive"
        )
    if given.ms_per_record < 0:
        raise ValueError(f"--ms-per-record must be 0 or more, not {given.ms_per_record}")
    health_port = number(given.health_port, env.HEALTH_PORT, 0)
    if not 0 <= health_port <= 65535:
        raise ValueError(
            f"--health-port/{env.HEALTH_PORT} must be 0 (off) to 65535, not {health_port}"
        )
    close_timeout_ms = number(
        given.close_timeout_ms, env.CLOSE_TIMEOUT_MS, DEFAULT_CLOSE_TIMEOUT_MS
    )
    if close_timeout_ms <= 0:
        raise ValueError(
            f"--close-timeout-ms/{env.CLOSE_TIMEOUT_MS} must be positive, not {close_timeout_ms}"
        )
    source_url = pick(given.source, env.SOURCE) or "synthetic"
    kafka_bootstrap = None
    if source_url != "synthetic":
        from staticfleet.kafka.source import bootstrap_of

        kafka_bootstrap = bootstrap_of(source_url)
    kafka_settings = PLAINTEXT_SETTINGS
    kafka_settings_file: KafkaSettingsFile | None = None
    kafka_config = pick(given.kafka_config, env.KAFKA_CONFIG)
    if kafka_config is not None:
        if kafka_bootstrap is None and not url.startswith("kafka://"):
            raise ValueError(
                f"--kafka-config/{env.KAFKA_CONFIG} is for kafka:// connections, but neither "
                "the coordinator nor the source is kafka://"
            )
        kafka_settings_file = KafkaSettingsFile(kafka_config)
        kafka_settings = kafka_settings_file.current()
        # Read the certificates now: a missing or unreadable file is a usage error at start,
        # not a failure at the first connection. Imported here: it brings in the Kafka
        # protocol (kafka-python), which a member on our coordinator never uses.
        from coordinator.client.kafka_security import tls_context

        tls_context(kafka_settings)
        logger.info("Kafka client settings from %s: %s", kafka_config, kafka_settings.describe())
    ca_file = pick(given.coordinator_ca_file, env.COORDINATOR_CA_FILE)
    coordinator_ssl: ssl.SSLContext | None = None
    if url.startswith("https://"):
        try:
            coordinator_ssl = client_context(Path(ca_file) if ca_file else None)
        except CoordinatorTlsConfigError as error:
            raise ValueError(f"--coordinator-ca-file/{env.COORDINATOR_CA_FILE}: {error}") from None
    elif ca_file is not None:
        raise ValueError(
            f"--coordinator-ca-file/{env.COORDINATOR_CA_FILE} is set but the coordinator URL "
            f"{url!r} is not https://: use https:// (a plain http:// URL sends the token readable)"
        )
    return Settings(
        url=url,
        coordinator_ssl=coordinator_ssl,
        token=_token(pick(given.token, env.TOKEN), pick(given.token_file, env.TOKEN_FILE)),
        config=config,
        event_log=pick(given.event_log, env.EVENT_LOG),
        leave_on_close=given.leave_on_close,
        commit_interval_ms=given.commit_interval_ms,
        poll_interval_ms=given.poll_interval_ms,
        source=SyntheticSource(
            records_per_second=given.records_per_second,
            retention_records=given.retention_records,
            epoch_ms=given.source_epoch_ms,
        ),
        kafka_bootstrap=kafka_bootstrap,
        max_poll_records=given.max_poll_records,
        ms_per_record=given.ms_per_record,
        standby_id=standby_id,
        kafka_settings=kafka_settings,
        kafka_settings_file=kafka_settings_file,
        remote_assignor=remote_assignor,
        standby_wait=standby_wait,
        health_port=health_port,
        close_timeout_ms=close_timeout_ms,
    )


def _token(token: str | None, token_file: str | None) -> str | TokenFile | None:
    """The bearer token, or the file that holds it (read again when the kubelet rotates it)."""
    if token_file is None:
        return token
    if token is not None:
        raise ValueError(
            f"give the token (--token/{env.TOKEN}) or its file "
            f"(--token-file/{env.TOKEN_FILE}), not both"
        )
    try:
        return TokenFile(token_file)
    except TokenFileError as error:
        raise ValueError(f"--token-file/{env.TOKEN_FILE}: {error}") from None
