"""`staticfleet coordinator serve|openapi`: the coordinator as a process of its own.

`serve` runs the HTTP server over a `GroupCoordinator` on a store (SQLite by default),
writes the bound port to `--ready-file` once listening (so callers can use `--port 0`), and
on SIGTERM/SIGINT stops accepting, closes the coordinator (store flushed) and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.server.gc_policy import DEFAULT_FREEZE_INTERVAL_S

# Standard library only: cheap enough for `staticfleet --help`.
from coordinator.server.tls import (
    DEFAULT_RELOAD_INTERVAL_S,
    ReloadingTls,
    TlsConfigError,
    TlsFiles,
    plain_http_problem,
)
from staticfleet.logs import add_log_format_argument, configure_logging

if TYPE_CHECKING:
    from coordinator.server import AuthConfig

log = logging.getLogger("staticfleet.coordinator")

DEFAULT_STORE = "sqlite://staticfleet-coordinator.db"
DEFAULT_PORT = 9092


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "coordinator", help="run the group coordinator server, or print its API document"
    )
    commands = parser.add_subparsers(dest="coordinator_command", required=True)

    serve = commands.add_parser(
        "serve",
        help="serve the coordinator over HTTP/JSON",
        description=(
            "Serve the group coordinator over HTTP/JSON. Tokens come from --tokens-file, "
            "--admin-token/--member-token and the environment (STATICFLEET_ADMIN_TOKEN, "
            "STATICFLEET_MEMBER_TOKEN with STATICFLEET_GROUP_ID, STATICFLEET_TOKENS_FILE); "
            "see docs/server.md."
        ),
    )
    serve.add_argument(
        "--store",
        default=DEFAULT_STORE,
        help="memory://, sqlite:///abs/path.db or sqlite://relative.db (default: %(default)s)",
    )
    serve.add_argument(
        "--create",
        action="store_true",
        help="create the SQLite store's missing directories (otherwise a missing one is an "
        "error, so a mistyped path cannot start an empty coordinator)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="0 picks a free port (default: %(default)s)"
    )
    serve.add_argument(
        "--tls-cert-file",
        type=Path,
        help="serve HTTPS with this certificate (PEM; e.g. a mounted Secret's tls.crt); "
        "reloaded when it changes (docs/server.md, TLS)",
    )
    serve.add_argument("--tls-key-file", type=Path, help="the certificate's key (PEM, tls.key)")
    serve.add_argument(
        "--tls-reload-interval",
        type=float,
        default=DEFAULT_RELOAD_INTERVAL_S,
        help="seconds between checks of the TLS files for a new pair (default: %(default)s)",
    )
    serve.add_argument(
        "--insecure-http",
        action="store_true",
        help="serve plain HTTP on a non-loopback address (tokens cross the network readable); "
        "plain HTTP on loopback needs no flag",
    )
    serve.add_argument("--tokens-file", type=Path, help='JSON: {"admin": [...], "members": {...}}')
    serve.add_argument(
        "--admin-token",
        action="append",
        default=[],
        metavar="TOKEN",
        help="an admin token (repeatable; prefer the environment or a file: flags show in ps)",
    )
    serve.add_argument(
        "--member-token",
        action="append",
        default=[],
        metavar="GROUP:TOKEN",
        help="a member token for a group (repeatable)",
    )
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="no authentication at all: every caller is admin (local experiments only)",
    )
    serve.add_argument("--min-session-timeout-ms", type=int, default=6000)
    serve.add_argument("--max-session-timeout-ms", type=int, default=1_800_000)
    serve.add_argument("--initial-rebalance-delay-ms", type=int, default=3000)
    serve.add_argument("--group-max-size", type=int, default=None)
    serve.add_argument(
        "--max-rebalance-timeout-ms",
        type=int,
        default=1_800_000,
        help="joins with a longer rebalance_timeout_ms get INVALID_REQUEST (default: %(default)s)",
    )
    serve.add_argument(
        "--max-member-metadata-bytes",
        type=int,
        default=1024 * 1024,
        help="protocol metadata one member may send in a join (default: %(default)s)",
    )
    serve.add_argument(
        "--offset-metadata-max-bytes",
        type=int,
        default=4096,
        help="offset.metadata.max.bytes: longer commit metadata gets OFFSET_METADATA_TOO_LARGE "
        "(default: %(default)s)",
    )
    serve.add_argument(
        "--journal-retention-ms",
        type=int,
        default=7 * 24 * 3600 * 1000,
        help="delete journal rows older than this; 0 keeps them for ever (default: 7 days)",
    )
    serve.add_argument(
        "--journal-retention-rows",
        type=int,
        default=1_000_000,
        help="keep at most this many journal rows; 0: no row limit (default: %(default)s)",
    )
    serve.add_argument(
        "--topics",
        default="",
        metavar="NAME=COUNT,...",
        help="topic metadata to merge in at startup, e.g. orders=48,payments=12",
    )
    serve.add_argument(
        "--ready-file",
        type=Path,
        help="written with the bound port once listening; removed on a clean exit",
    )
    serve.add_argument(
        "--max-body-bytes", type=int, default=None, help="request body limit (default 4 MiB)"
    )
    serve.add_argument(
        "--shutdown-timeout",
        type=float,
        default=10.0,
        help="seconds to let open requests finish on shutdown (default: %(default)s)",
    )
    serve.add_argument(
        "--backlog",
        type=int,
        default=1024,
        help="listen backlog: pending connections beyond it are dropped (default: %(default)s)",
    )
    serve.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        help="seconds a client has for a complete request head (default: %(default)s)",
    )
    serve.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        help="seconds a client has to send a request body; 408 after (default: %(default)s)",
    )
    serve.add_argument(
        "--keepalive-timeout",
        type=float,
        default=75.0,
        help="seconds an idle kept-alive connection stays open (default: %(default)s)",
    )
    serve.add_argument(
        "--max-connections-per-address",
        type=int,
        default=4096,
        help="open connections per client IP; 0: no cap (default: %(default)s)",
    )
    serve.add_argument(
        "--gc-freeze-interval",
        type=float,
        default=DEFAULT_FREEZE_INTERVAL_S,
        help="seconds between gc.freeze() calls, which keep garbage-collection pauses short "
        "with a large fleet; 0: never (default: %(default)s)",
    )
    serve.add_argument("--access-log", action="store_true", help="log every request")
    serve.add_argument("--log-level", default="INFO", help="(default: %(default)s)")
    add_log_format_argument(serve)
    serve.set_defaults(handler=serve_command)

    openapi = commands.add_parser("openapi", help="print the OpenAPI document")
    openapi.add_argument("--output", type=Path, help="write it to this file instead")
    openapi.set_defaults(handler=openapi_command)


def parse_topics(text: str) -> dict[str, int]:
    """`a=3,b=12` -> {"a": 3, "b": 12}, checked as `PUT /v1/topics` checks it."""
    from coordinator.server.models import topic_problem

    topics: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, equals, count = item.rpartition("=")
        if not equals or not name or not count.strip().isdigit():
            raise ValueError(f"--topics entry {item!r} is not NAME=COUNT")
        problem = topic_problem(name.strip(), int(count))
        if problem:
            raise ValueError(f"--topics: {problem}")
        topics[name.strip()] = int(count)
    return topics


def openapi_command(args: argparse.Namespace) -> int:
    from coordinator.server import render_openapi

    document = render_openapi()
    if args.output:
        args.output.write_text(document, encoding="utf-8")
    else:
        sys.stdout.write(document)
    return 0


def serve_command(args: argparse.Namespace) -> int:
    configure_logging(args.log_level.upper(), args.log_format)
    try:
        return _run_loop(_serve(args))
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return 130


def _run_loop(main: Coroutine[Any, Any, int]) -> int:
    """On uvloop where it is installed (a dependency on Linux and macOS): it cut the time a
    heartbeat spends reading and writing its socket (bench/capacity.py)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def _auth_config(args: argparse.Namespace) -> AuthConfig:
    # Imported here, like everything heavy: `staticfleet --help` imports this module.
    from coordinator.server import ENV_GROUP_ID, AuthConfig

    config = AuthConfig.from_env(os.environ).merged(
        AuthConfig.from_values(
            admin_tokens=args.admin_token,
            member_specs=args.member_token,
            default_group=os.environ.get(ENV_GROUP_ID) or None,
        )
    )
    if args.tokens_file:
        config = config.merged(AuthConfig.from_tokens_file(args.tokens_file))
    if args.insecure:
        config = config.merged(AuthConfig(insecure=True))
    config.check_usable()
    return config


async def _serve(args: argparse.Namespace) -> int:
    from coordinator import CoordinatorConfig, GroupCoordinator, SystemClock, open_store
    from coordinator.server import AuthConfigError, create_app, start_server
    from coordinator.server.connections import ConnectionLimits
    from coordinator.server.descriptors import raise_open_file_limit
    from coordinator.server.gc_policy import freeze_periodically
    from coordinator.server.limits import DEFAULT_MAX_BODY_BYTES
    from coordinator.store import SqliteStore, StoreError

    try:
        auth = _auth_config(args)
        tls = _tls(args)
        problem = plain_http_problem(
            args.host, tls=tls is not None, insecure_http=args.insecure_http
        )
        if problem is not None:
            raise ValueError(problem)
        topics = parse_topics(args.topics)
        config = CoordinatorConfig(
            group_min_session_timeout_ms=args.min_session_timeout_ms,
            group_max_session_timeout_ms=args.max_session_timeout_ms,
            group_initial_rebalance_delay_ms=args.initial_rebalance_delay_ms,
            group_max_size=args.group_max_size,
            group_max_rebalance_timeout_ms=args.max_rebalance_timeout_ms,
            group_max_member_metadata_bytes=args.max_member_metadata_bytes,
            offset_metadata_max_bytes=args.offset_metadata_max_bytes,
            journal_retention_ms=args.journal_retention_ms or None,
            journal_retention_rows=args.journal_retention_rows or None,
        )
        limits = ConnectionLimits(
            header_timeout_s=args.header_timeout,
            body_timeout_s=args.body_timeout,
            keepalive_timeout_s=args.keepalive_timeout,
            max_connections_per_address=args.max_connections_per_address or None,
        )
        store = open_store(args.store, create_dirs=args.create or args.store == DEFAULT_STORE)
        if isinstance(store, SqliteStore):
            store.check_path()
        coordinator = GroupCoordinator(config=config, clock=SystemClock(), store=store)
        app = create_app(
            coordinator,
            auth,
            max_body_bytes=args.max_body_bytes or DEFAULT_MAX_BODY_BYTES,
            initial_topics=topics,
            connection_limits=limits,
        )
    except (AuthConfigError, TlsConfigError, ValueError, StoreError) as error:
        print(f"staticfleet coordinator serve: {error}", file=sys.stderr)
        return 2

    # One descriptor per member connection: the soft limit (often 1,024) is the fleet's size.
    # Raised once the arguments and the store are good, so a refusal stays one line.
    raise_open_file_limit()

    if args.ready_file:
        # A stale file from a killed run must not send anyone to an old port.
        args.ready_file.unlink(missing_ok=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    try:
        server = await start_server(
            app,
            args.host,
            args.port,
            shutdown_timeout=args.shutdown_timeout,
            access_log=args.access_log,
            backlog=args.backlog,
            tls=tls,
            tls_reload_interval_s=args.tls_reload_interval,
        )
    except Exception as error:
        log.error("cannot start: %s", error)
        return 1
    log.info("listening on %s (store %s)", server.url, args.store)
    if args.ready_file:
        _write_atomically(args.ready_file, f"{server.port}\n")

    freezer = (
        asyncio.create_task(freeze_periodically(args.gc_freeze_interval))
        if args.gc_freeze_interval > 0
        else None
    )
    await stop.wait()
    if freezer is not None:
        freezer.cancel()
    log.info("stopping: no new connections, closing the coordinator")
    await server.stop()
    if args.ready_file:
        args.ready_file.unlink(missing_ok=True)
    log.info("stopped")
    return 0


def _tls(args: argparse.Namespace) -> ReloadingTls | None:
    files = TlsFiles.optional(
        args.tls_cert_file, args.tls_key_file, "--tls-cert-file and --tls-key-file"
    )
    if files is None:
        return None
    if args.insecure_http:
        raise ValueError("--insecure-http contradicts --tls-cert-file: choose one")
    if not args.tls_reload_interval > 0:
        raise ValueError("--tls-reload-interval must be positive")
    return ReloadingTls(files)


def _write_atomically(path: Path, text: str) -> None:
    # Readers poll for the file: they must never see it half written.
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
