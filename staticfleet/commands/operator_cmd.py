"""`staticfleet operator run`: the Kopf operator with the embedded coordinator, one process.

Flags are what the Helm chart passes (charts/staticfleet/templates/deployment.yaml); tokens
come from the environment (STATICFLEET_ADMIN_TOKEN, STATICFLEET_MEMBER_TOKEN with
STATICFLEET_GROUP_ID, STATICFLEET_TOKENS_FILE), as for `staticfleet coordinator serve`; each
ConsumerGroup's member token is added at runtime from its Secret (docs/operator.md).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from coordinator.server.gc_policy import DEFAULT_FREEZE_INTERVAL_S, DEFAULT_FULL_INTERVAL_S
from staticfleet.logs import add_log_format_argument, configure_logging

log = logging.getLogger("staticfleet.operator")

# Accepted by earlier versions, now without meaning: each ConsumerGroup has its own member
# token Secret (spec.tokenSecretRef, else `<group>-member-token`); see docs/operator.md.
ENV_MEMBER_TOKEN_SECRET = "STATICFLEET_MEMBER_TOKEN_SECRET"


def health_port(value: str) -> int:
    """A member health port: 0 (off) to 65535, as `member run --health-port` takes it."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0 (off) to 65535, not {port}")
    return port


def _ms(value: str, least: int) -> int:
    try:
        ms = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of ms: {value!r}") from None
    if ms < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, not {ms}")
    return ms


def positive_ms(value: str) -> int:
    """A duration in ms, above 0 (a session the coordinator's config refuses otherwise)."""
    return _ms(value, 1)


def non_negative_ms(value: str) -> int:
    """A delay in ms, 0 for none."""
    return _ms(value, 0)


def register(subparsers: Any) -> None:
    # Registering imports nothing of the `operator` extra (kopf): the command is listed on the
    # base install, and running it without the extra says which one to install (staticfleet.cli).
    parser = subparsers.add_parser("operator", help="run the Kubernetes operator")
    commands = parser.add_subparsers(dest="operator_command", required=True)
    run = commands.add_parser(
        "run",
        help="run the Kopf operator and the embedded coordinator server",
        description=(
            "Run the staticfleet operator: ConsumerGroup handlers, the mutating webhook for "
            "adopted pods, and the group coordinator members connect to. Logs in with the "
            "pod's service account, else the current kubeconfig context. See docs/operator.md."
        ),
    )
    run.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="watch this namespace (repeatable); none: all namespaces",
    )
    run.add_argument(
        "--store",
        default="sqlite:///data/coordinator.db",
        help="coordinator store: memory://, sqlite:///abs/path.db (default: %(default)s)",
    )
    run.add_argument("--coordinator-host", default="0.0.0.0", help="(default: %(default)s)")
    run.add_argument("--coordinator-port", type=int, default=9092, help="(default: %(default)s)")
    run.add_argument(
        "--coordinator-url",
        help="the coordinator URL members are told (default: http://127.0.0.1:<port>)",
    )
    run.add_argument(
        "--coordinator-tls-cert-file",
        type=Path,
        help="serve the coordinator over HTTPS with this certificate (PEM, reloaded when it "
        "changes; docs/server.md, TLS)",
    )
    run.add_argument("--coordinator-tls-key-file", type=Path, help="its key (PEM)")
    run.add_argument(
        "--coordinator-tls-ca-dir",
        type=Path,
        help="instead: issue the coordinator's serving certificate from the CA in this "
        "directory (ca.crt, ca.key) and renew it 10 days before it expires",
    )
    run.add_argument(
        "--coordinator-tls-dns-name",
        action="append",
        default=[],
        metavar="NAME",
        help="a name the issued certificate is for (repeatable; default: the host of "
        "--coordinator-url)",
    )
    run.add_argument(
        "--coordinator-tls-work-dir",
        type=Path,
        default=Path("/tmp/staticfleet-coordinator-tls"),
        help="where the issued certificate is written (default: %(default)s)",
    )
    run.add_argument("--webhook-port", type=int, help="serve the mutating webhook on this port")
    run.add_argument(
        "--webhook-host", default="0.0.0.0", help="the webhook's address (default: %(default)s)"
    )
    run.add_argument("--webhook-cert", type=Path, help="TLS certificate of the webhook (PEM)")
    run.add_argument("--webhook-key", type=Path, help="TLS key of the webhook (PEM)")
    run.add_argument("--peering", help="Kopf peering object name; none: standalone")
    run.add_argument(
        "--priority", type=int, help="peering priority (default: by start time, newest wins)"
    )
    run.add_argument("--health-port", type=int, help="serve Kopf's /healthz on this port")
    run.add_argument(
        "--kafka-journal-dir",
        type=Path,
        help="journal rebalances of Kafka-coordinated groups (seen by describe) here, "
        "one JSON-lines file per group id, for `staticfleet spark analytics`",
    )
    run.add_argument(
        "--kafka-config",
        type=Path,
        help="Kafka client settings (a .properties file, librdkafka names: security.protocol, "
        "sasl.*, ssl.*) for the operator's own connection to the clusters of Kafka-coordinated "
        "groups without spec.coordinator.kafka (default: PLAINTEXT)",
    )
    run.add_argument(
        "--interval",
        type=float,
        default=2.0,
        help="seconds until the next pass of a ConsumerGroup that is not settled (a rollout "
        "under way, pods not yet as wanted); a settled one waits for events (default: "
        "%(default)s)",
    )
    run.add_argument(
        "--resync",
        type=float,
        default=60.0,
        help="seconds between safety-net passes of every ConsumerGroup (default: %(default)s)",
    )
    run.add_argument(
        "--gc-freeze-interval",
        type=float,
        default=DEFAULT_FREEZE_INTERVAL_S,
        help="seconds between gc.freeze() calls, which keep garbage-collection pauses short "
        "with many groups and pods; 0: never (default: %(default)s)",
    )
    run.add_argument(
        "--gc-full-interval",
        type=float,
        default=DEFAULT_FULL_INTERVAL_S,
        help="the shortest time in seconds between two full garbage collections, each run "
        "once what is frozen has grown by a quarter since the last, to reclaim what died "
        "after being frozen (a pause of about 0.15 s at 1,000 groups) (default: %(default)s)",
    )
    run.add_argument(
        "--min-session-timeout-ms",
        type=positive_ms,
        default=6000,
        help="the embedded coordinator's shortest session a member may ask for, as Kafka's "
        "group.min.session.timeout.ms (default: %(default)s)",
    )
    run.add_argument(
        "--initial-rebalance-delay-ms",
        type=non_negative_ms,
        default=3000,
        help="how long a new group's first rebalance waits for more members, as Kafka's "
        "group.initial.rebalance.delay.ms (default: %(default)s)",
    )
    run.add_argument(
        "--insecure",
        action="store_true",
        help="serve the coordinator without authentication (local use only)",
    )
    run.add_argument(
        "--max-body-bytes",
        type=int,
        default=4 * 1024 * 1024,
        help="the coordinator's request body limit; a group's own requests may use what its "
        "size needs (default: %(default)s)",
    )
    run.add_argument(
        "--partition-lag-metrics",
        action="store_true",
        help="export staticfleet_operator_group_partition_lag per partition (off: the total "
        "per group only, so series stay bounded)",
    )
    run.add_argument(
        "--member-token-audience",
        default=None,
        metavar="AUDIENCE",
        help="members of embedded groups present their pod's projected ServiceAccount token "
        "for AUDIENCE (e.g. staticfleet-coordinator), reviewed with TokenReview and good for "
        "their pod's instance id only; unset: each group's token Secret (docs/server.md)",
    )
    run.add_argument(
        "--member-health-port",
        type=health_port,
        default=0,
        metavar="PORT",
        help="member pods whose template sets no health port serve /livez and /readyz on "
        "PORT (STATICFLEET_HEALTH_PORT) and get httpGet probes on them; 0 (the default): "
        "only where the template turns them on (docs/operator.md, 'Member health probes')",
    )
    run.add_argument(
        "--no-secret-watch",
        dest="secret_watch",
        action="store_false",
        help="list and watch no Secrets: each pass GETs the Secrets it reads, so a rotation "
        "is seen on the group's next pass, at the latest after --resync (docs/operator.md, "
        "Permissions)",
    )
    run.add_argument("--verbose", action="store_true", help="debug logging")
    add_log_format_argument(run)
    run.set_defaults(handler=run_command, extra="operator")


def coordinator_tls(args: argparse.Namespace) -> Any:
    """The embedded coordinator's TLS files, checked now (a TlsConfigError is a ValueError:
    exit 2 naming the file), or None for plain HTTP."""
    from coordinator.server.tls import TlsFiles, server_context

    cert = getattr(args, "coordinator_tls_cert_file", None)
    key = getattr(args, "coordinator_tls_key_file", None)
    ca_dir = getattr(args, "coordinator_tls_ca_dir", None)
    if ca_dir is not None:
        return _issuer(args, ca_dir, cert is not None or key is not None)
    files = TlsFiles.optional(
        cert, key, "--coordinator-tls-cert-file and --coordinator-tls-key-file"
    )
    if files is None:
        return None
    server_context(files)
    return files


def _issuer(args: argparse.Namespace, ca_dir: Path, with_files: bool) -> Any:
    from urllib.parse import urlsplit

    from staticfleet_operator.coordinator_cert import ServingCertIssuer

    if with_files:
        raise ValueError(
            "--coordinator-tls-ca-dir issues the certificate itself: give it or "
            "--coordinator-tls-cert-file/--coordinator-tls-key-file, not both"
        )
    names = tuple(args.coordinator_tls_dns_name) or tuple(
        host for host in [urlsplit(args.coordinator_url or "").hostname] if host
    )
    issuer = ServingCertIssuer(ca_dir, args.coordinator_tls_work_dir, names)
    issuer.ensure()  # a CA that cannot be read: exit 2 now, naming it
    return issuer


def options_from_args(args: argparse.Namespace) -> Any:
    from coordinator.client.kafka_settings import PLAINTEXT_SETTINGS, KafkaClientSettings
    from staticfleet_operator.app import OperatorOptions, namespaces_of

    if (args.webhook_cert is None) != (args.webhook_key is None):
        raise ValueError("--webhook-cert and --webhook-key go together")
    kafka_config = getattr(args, "kafka_config", None)
    # A bad file is a KafkaSettingsError (a ValueError) naming the file and the property.
    kafka_settings = (
        KafkaClientSettings.from_file(kafka_config) if kafka_config else PLAINTEXT_SETTINGS
    )
    return OperatorOptions(
        kafka_settings=kafka_settings,
        namespaces=namespaces_of(args.namespace),
        store=args.store,
        coordinator_host=args.coordinator_host,
        coordinator_port=args.coordinator_port,
        coordinator_url=args.coordinator_url or f"http://127.0.0.1:{args.coordinator_port}",
        coordinator_tls=coordinator_tls(args),
        webhook_port=args.webhook_port,
        webhook_cert=args.webhook_cert,
        webhook_key=args.webhook_key,
        webhook_host=args.webhook_host,
        peering=args.peering,
        priority=args.priority,
        health_port=args.health_port,
        kafka_journal_dir=args.kafka_journal_dir,
        partition_lag_metrics=args.partition_lag_metrics,
        member_token_audience=args.member_token_audience or None,
        member_health_port=args.member_health_port or None,
        secret_watch=args.secret_watch,
        interval=args.interval,
        resync=args.resync,
        max_body_bytes=args.max_body_bytes,
        min_session_timeout_ms=args.min_session_timeout_ms,
        initial_rebalance_delay_ms=args.initial_rebalance_delay_ms,
        gc_freeze_interval=args.gc_freeze_interval,
        gc_full_interval=args.gc_full_interval,
    )


def hide_kubernetes_asyncio() -> None:
    """Make kubernetes_asyncio unimportable in this process, unless it is imported already.

    Kopf imports every API and model class of kubernetes_asyncio when that package is
    importable (kopf/_cogs/helpers/thirdparty.py: to recognise its model objects), tens of
    MiB of the operator's memory and a part of every start; the operator hands Kopf only
    dicts and calls the API over Kopf's own session (kube.py). The image does not install
    it; where it is installed beside the operator (the project's e2e tools use it), an entry
    of None in `sys.modules` makes the import fail as if it were absent."""
    if "kubernetes_asyncio" not in sys.modules:
        sys.modules["kubernetes_asyncio"] = None  # type: ignore[assignment]


def run_command(args: argparse.Namespace) -> int:
    hide_kubernetes_asyncio()
    from kopf._core.actions.loggers import ObjectJsonFormatter

    from coordinator.server import AuthConfig, AuthConfigError
    from coordinator.server.descriptors import raise_open_file_limit
    from staticfleet_operator.app import run_operator

    # Kopf's JSON formatter (a python-json-logger subclass) adds its per-object lines'
    # `object` reference: Kopf's own JSON format, in the same keys as ours.
    configure_logging(
        logging.DEBUG if args.verbose else logging.INFO,
        args.log_format,
        json_factory=ObjectJsonFormatter,
    )
    try:
        options = options_from_args(args)
        auth = AuthConfig.from_env(os.environ)
        if args.insecure:
            auth = auth.merged(AuthConfig(insecure=True))
        auth.check_usable()
    except (AuthConfigError, ValueError) as error:
        print(f"staticfleet operator run: {error}", file=sys.stderr)
        return 2
    # The embedded coordinator holds one descriptor per member connection (descriptors.py);
    # raised once the arguments are good, so a refused start stays one line (as serve's).
    raise_open_file_limit()
    if os.environ.get(ENV_MEMBER_TOKEN_SECRET):
        log.warning(
            "%s is ignored: each ConsumerGroup's member token is in the Secret its "
            "spec.tokenSecretRef names, else in <group>-member-token (created by the operator)",
            ENV_MEMBER_TOKEN_SECRET,
        )
    asyncio.run(run_operator(options, auth))
    return 0
