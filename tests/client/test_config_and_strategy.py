"""Settings, offered protocols and behaviour (KIP-429), leader-side safety, env parsing."""

from __future__ import annotations

import pytest

from coordinator.assignors import RebalanceProtocol, get_assignor
from coordinator.assignors.handoffs import current_owners, defer_cooperative_handoffs
from coordinator.client import ConfigurationError, MemberConfig
from coordinator.client.strategy import build_strategy, highest_common_protocol
from coordinator.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    decode_subscription,
)
from staticfleet.cli import build_parser
from staticfleet.commands.member_cmd import overrides_from
from staticfleet.member.settings import Overrides, settings_from

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def config(**overrides: object) -> MemberConfig:
    settings: dict[str, object] = {"group_id": "g", "topics": ("t",), **overrides}
    return MemberConfig(**settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("protocol", "offered", "behaviour"),
    [
        ("eager", ("range",), RebalanceProtocol.EAGER),
        ("compatible", ("cooperative-sticky", "range"), RebalanceProtocol.EAGER),
        ("cooperative", ("cooperative-sticky",), RebalanceProtocol.COOPERATIVE),
    ],
)
def test_offered_protocols_and_behaviour(protocol, offered, behaviour):
    cfg = config(rebalance_protocol=protocol)
    strategy = build_strategy(cfg)
    assert cfg.offered_assignors == offered
    assert tuple(strategy.assignors) == offered
    assert strategy.behaviour is behaviour


def test_highest_common_protocol_is_kafkas_rule():
    assert (
        highest_common_protocol([get_assignor("cooperative-sticky")])
        is RebalanceProtocol.COOPERATIVE
    )
    both = [get_assignor("cooperative-sticky"), get_assignor("range")]
    assert highest_common_protocol(both) is RebalanceProtocol.EAGER


def test_cooperative_with_an_eager_only_assignor_fails_at_startup():
    with pytest.raises(ConfigurationError, match="cooperative"):
        build_strategy(config(rebalance_protocol="cooperative", cooperative_assignor="range"))
    with pytest.raises(ConfigurationError, match="unknown assignor"):
        build_strategy(config(eager_assignor="nope"))


def test_leave_on_close_defaults_follow_kip_345():
    assert config().leave_on_close is True
    assert config(group_instance_id="i-0").leave_on_close is False
    assert config(group_instance_id="i-0", leave_group_on_close=True).leave_on_close is True


@pytest.mark.parametrize(
    "bad",
    [
        {"group_id": ""},
        {"topics": ()},
        {"topics": "t"},
        {"group_instance_id": ""},
        {"heartbeat_interval_ms": 10_000},
        {"rebalance_protocol": "sometimes"},
    ],
)
def test_invalid_settings_are_refused(bad):
    with pytest.raises(ValueError):
        config(**bad)


def test_cooperative_metadata_claims_owned_partitions_with_their_generation():
    strategy = build_strategy(config(rebalance_protocol="cooperative"))
    (protocol,) = strategy.join_protocols(["t"], [T1, T0], 7)
    subscription = decode_subscription(protocol.metadata)
    assert subscription.owned_partitions == (T0, T1)
    assert subscription.generation_id == 7
    assert subscription.topics == ("t",)
    eager = build_strategy(config(rebalance_protocol="compatible"))
    for offered in eager.join_protocols(["t"], [T0], 7):
        assert decode_subscription(offered.metadata).owned_partitions == ()


def test_current_owners_follow_kip_792():
    subscriptions = {
        "a": Subscription(("t",), owned_partitions=(T0, T1), generation_id=5),
        "b": Subscription(("t",), owned_partitions=(T1,), generation_id=4),  # stale claim
        "c": Subscription(("t",), owned_partitions=(T2,), generation_id=5),
        "d": Subscription(("t",), owned_partitions=(T2,), generation_id=5),  # tie: nobody
    }
    assert current_owners(subscriptions) == {T0: "a", T1: "a"}


def test_leader_withholds_a_partition_still_owned_by_someone_else():
    subscriptions = {
        "a": Subscription(("t",), owned_partitions=(T0, T1), generation_id=3),
        "b": Subscription(("t",), generation_id=3),
    }
    unsafe = {"a": Assignment((T0,)), "b": Assignment((T1, T2))}
    safe = defer_cooperative_handoffs(subscriptions, unsafe)
    assert safe == {"a": Assignment((T0,)), "b": Assignment((T2,))}


def flags(*argv: str) -> Overrides:
    """What `staticfleet member run ARGV` gives the runtime."""
    return overrides_from(build_parser().parse_args(["member", "run", *argv]))


def test_member_run_takes_a_cost_per_record_and_refuses_a_negative_one() -> None:
    environ = {
        "STATICFLEET_COORDINATOR_URL": "http://c:8080",
        "STATICFLEET_GROUP_ID": "g",
        "STATICFLEET_TOPICS": "t",
    }
    assert settings_from(flags(), environ).ms_per_record == 0.0
    assert settings_from(flags("--ms-per-record", "20"), environ).ms_per_record == 20.0
    with pytest.raises(ValueError, match="--ms-per-record must be 0 or more"):
        settings_from(flags("--ms-per-record", "-1"), environ)


def test_member_run_settings_come_from_env_and_flags_win():
    environ = {
        "STATICFLEET_COORDINATOR_URL": "http://coordinator:8080",
        "STATICFLEET_GROUP_ID": "orders",
        "STATICFLEET_INSTANCE_ID": "",
        "STATICFLEET_TOPICS": "a, b,,c",
        "STATICFLEET_REBALANCE_PROTOCOL": "compatible",
        "STATICFLEET_EAGER_ASSIGNOR": "roundrobin",
        "STATICFLEET_COOPERATIVE_ASSIGNOR": "static-sticky",
        "STATICFLEET_SESSION_TIMEOUT_MS": "45000",
        "STATICFLEET_REBALANCE_TIMEOUT_MS": "60000",
        "STATICFLEET_HEARTBEAT_INTERVAL_MS": "1500",
        "STATICFLEET_TOKEN": "secret",
        "STATICFLEET_EVENT_LOG": "/tmp/events.jsonl",
    }
    settings = settings_from(flags(), environ)
    cfg = settings.config
    assert settings.url == "http://coordinator:8080" and settings.token == "secret"
    assert settings.event_log == "/tmp/events.jsonl"
    assert (cfg.group_id, cfg.topics, cfg.group_instance_id) == ("orders", ("a", "b", "c"), None)
    assert cfg.offered_assignors == ("static-sticky", "roundrobin")
    assert (cfg.session_timeout_ms, cfg.rebalance_timeout_ms, cfg.heartbeat_interval_ms) == (
        45000,
        60000,
        1500,
    )
    assert cfg.leave_on_close  # dynamic
    assert cfg.authorization_retry_ms == 120_000

    cfg = settings_from(flags("--instance-id", "orders-3", "--topics", "x"), environ).config
    assert (cfg.group_instance_id, cfg.topics, cfg.leave_on_close) == ("orders-3", ("x",), False)
    assert (
        settings_from(flags("--authorization-retry-ms", "0"), environ).config.authorization_retry_ms
        == 0
    )


def test_settings_need_no_command_line():
    """A caller in code (the Spark executors) gives values as the flags would."""
    environ = {
        "STATICFLEET_COORDINATOR_URL": "http://x",
        "STATICFLEET_GROUP_ID": "g",
        "STATICFLEET_TOPICS": "t",
        "STATICFLEET_INSTANCE_ID": "g-0",
    }
    given = Overrides(commit_interval_ms=500, leave_on_close=True)
    assert given == flags("--commit-interval-ms", "500", "--leave-on-close")
    settings = settings_from(given, environ)
    assert (settings.commit_interval_ms, settings.config.group_instance_id) == (500, "g-0")
    assert settings.config.leave_on_close  # given, though static
    assert settings_from(Overrides(), environ).commit_interval_ms == 1000


def test_member_run_reports_missing_settings():
    args = flags()
    with pytest.raises(ValueError, match="STATICFLEET_COORDINATOR_URL"):
        settings_from(args, {"STATICFLEET_GROUP_ID": "g", "STATICFLEET_TOPICS": "t"})
    with pytest.raises(ValueError, match="STATICFLEET_SESSION_TIMEOUT_MS"):
        settings_from(
            args,
            {
                "STATICFLEET_COORDINATOR_URL": "http://x",
                "STATICFLEET_GROUP_ID": "g",
                "STATICFLEET_TOPICS": "t",
                "STATICFLEET_SESSION_TIMEOUT_MS": "soon",
            },
        )


def test_member_run_reads_the_synthetic_source_unless_a_kafka_one_is_named():
    environ = {
        "STATICFLEET_COORDINATOR_URL": "http://x",
        "STATICFLEET_GROUP_ID": "g",
        "STATICFLEET_TOPICS": "t",
    }
    assert settings_from(flags(), environ).kafka_bootstrap is None
    with_kafka = {**environ, "STATICFLEET_SOURCE": "kafka://127.0.0.1:20001"}
    settings = settings_from(flags(), with_kafka)
    assert settings.kafka_bootstrap == "127.0.0.1:20001"
    assert (
        settings_from(flags("--source", "synthetic"), with_kafka).kafka_bootstrap is None
    )  # a flag wins
    with pytest.raises(ValueError, match="kafka://host:port"):
        settings_from(flags("--source", "kafka:9092"), environ)
