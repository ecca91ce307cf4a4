"""`staticfleet member run`: the command line of one fleet member process.

The flags are parsed here; the member itself is `staticfleet.member` (settings, event log,
consumer, `run_member`). It joins the group, consumes its assigned partitions (of the
synthetic source, or of real Kafka topics with `--source kafka://host:port`) and writes
one JSON line per ownership event. Settings come from flags or from the environment the
operator injects (`coordinator.client.env`); a flag wins. Exit codes:
`staticfleet.member.runtime`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from dataclasses import fields
from typing import Any

from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.client.strategy import ConfigurationError
from staticfleet.logs import add_log_format_argument, configure_logging
from staticfleet.member.runtime import EXIT_USAGE, run_member
from staticfleet.member.settings import DEFAULTS, Overrides, settings_from


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
        "--coordinator-ca-file",
        metavar="FILE",
        help=(
            "CA bundle (PEM) an https:// coordinator's certificate must chain to; default: "
            f"the system's roots [{env.COORDINATOR_CA_FILE}]"
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
    run.add_argument(
        "--standby-wait-ms",
        type=int,
        help=(
            "with --group-protocol consumer and an instance id: a standby for that instance id, "
            "joining again every --standby-retry-ms while the broker still holds it, for up to "
            f"this long (then exit 3) [{env.STANDBY_WAIT_MS}]"
        ),
    )
    run.add_argument(
        "--standby-retry-ms",
        type=int,
        default=DEFAULTS.standby_retry_ms,
        help="a waiting standby's join interval (default: %(default)s)",
    )
    run.add_argument("--topics", help=f"comma-separated topics [{env.TOPICS}]")
    run.add_argument(
        "--rebalance-protocol",
        "--group-protocol",
        choices=[setting.value for setting in RebalanceProtocolSetting],
        help=(
            "eager | compatible | cooperative (the classic protocol), or consumer (KIP-848's "
            f"ConsumerGroupHeartbeat; kafka:// only) [{env.REBALANCE_PROTOCOL}] (default eager)"
        ),
    )
    run.add_argument(
        "--remote-assignor",
        help=(
            "the broker's assignor for --group-protocol consumer (uniform, range) "
            f"[{env.REMOTE_ASSIGNOR}] (default: the broker's group.consumer.assignors first)"
        ),
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
        "--token-file",
        help=f"a file holding the bearer token, read again when it changes: a projected "
        f"ServiceAccount token [{env.TOKEN_FILE}]",
    )
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
        default=DEFAULTS.authorization_retry_ms,
        help="how long a refused token (HTTP 401/403, e.g. while the operator restarts) is "
        "retried before the member exits (default: %(default)s; 0: exit at once)",
    )
    run.add_argument(
        "--health-port",
        type=int,
        help=(
            "serve /livez (the run loop makes progress) and /readyz (stable in its generation, "
            f"or a standby heartbeating) on this port; 0: off [{env.HEALTH_PORT}] (0)"
        ),
    )
    run.add_argument(
        "--close-timeout-ms",
        type=int,
        help=(
            "how long a stop may spend closing (the revoke's commit, a LeaveGroup) before the "
            f"partitions are given up uncommitted [{env.CLOSE_TIMEOUT_MS}] (30000, as Kafka)"
        ),
    )
    run.add_argument("--client-id", default=None, help="client id reported to the coordinator")
    run.add_argument("--commit-interval-ms", type=int, default=DEFAULTS.commit_interval_ms)
    run.add_argument("--poll-interval-ms", type=int, default=DEFAULTS.poll_interval_ms)
    run.add_argument(
        "--source",
        help=f"synthetic, or kafka://host:port to read real topics [{env.SOURCE}] (synthetic)",
    )
    run.add_argument(
        "--max-poll-records",
        type=int,
        default=DEFAULTS.max_poll_records,
        help="records read per poll at most",
    )
    run.add_argument(
        "--ms-per-record",
        type=float,
        default=DEFAULTS.ms_per_record,
        help="time spent on each record read, a stand-in for real work (0)",
    )
    run.add_argument(
        "--records-per-second",
        type=float,
        default=DEFAULTS.records_per_second,
        help="per partition",
    )
    run.add_argument(
        "--retention-records", type=int, default=DEFAULTS.retention_records, help="per partition"
    )
    run.add_argument(
        "--source-epoch-ms",
        type=int,
        default=DEFAULTS.source_epoch_ms,
        help="when the synthetic logs began (ms)",
    )
    run.add_argument("--log-level", default="WARNING")
    add_log_format_argument(run)
    run.set_defaults(handler=run_command)


def overrides_from(args: argparse.Namespace) -> Overrides:
    """The flags given on the command line (argparse's attribute names are the fields')."""
    return Overrides(**{field.name: getattr(args, field.name) for field in fields(Overrides)})


def run_command(args: argparse.Namespace) -> int:
    configure_logging(
        getattr(logging, str(args.log_level).upper(), logging.WARNING), args.log_format
    )
    try:
        settings = settings_from(overrides_from(args), os.environ)
    except (ValueError, ConfigurationError) as error:
        print(f"staticfleet member run: {error}", file=sys.stderr)
        return EXIT_USAGE
    return asyncio.run(run_member(settings))
