"""How the long-running commands write their logs: `--log-format text|json`.

`text` is one human line per record (as before). `json` is one JSON object per line with
`timestamp` (ISO 8601, UTC), `level`, `logger` and `message`, plus every `extra=` field of
the record and `exc_info` for a traceback: what a log stack (Loki, Elasticsearch, Cloud
Logging) parses without a pattern. The JSON comes from python-json-logger, the maintained
formatter Kopf itself uses for its `--log-format=json`; `operator run` passes Kopf's subclass
of it so that Kopf's per-object lines keep their `object` reference (Kopf's own JSON format).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any, Final, TextIO

from pythonjsonlogger.json import JsonFormatter

LOG_FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The record attributes every JSON line carries, and the keys they are written under.
JSON_FIELDS: Final = ("levelname", "name", "message")
JSON_RENAMES: Final = {"levelname": "level", "name": "logger"}

# A JsonFormatter class (python-json-logger's, or Kopf's subclass of it).
JsonFormatterFactory = Callable[..., logging.Formatter]


def add_log_format_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text: one human line per record; json: one JSON object per line "
        "(timestamp, level, logger, message and the record's extra fields)",
    )


def json_formatter(factory: JsonFormatterFactory = JsonFormatter) -> logging.Formatter:
    options: dict[str, Any] = {"rename_fields": JSON_RENAMES, "timestamp": True}
    return factory(list(JSON_FIELDS), **options)


def formatter(
    log_format: str, json_factory: JsonFormatterFactory = JsonFormatter
) -> logging.Formatter:
    if log_format == "json":
        return json_formatter(json_factory)
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"unknown log format {log_format!r}: expected one of {', '.join(LOG_FORMATS)}")


class _CommandHandler(logging.StreamHandler[TextIO]):
    """The handler configure_logging installs (a second call replaces it)."""


def configure_logging(
    level: int | str,
    log_format: str,
    *,
    stream: TextIO | None = None,
    json_factory: JsonFormatterFactory = JsonFormatter,
) -> None:
    """The root logger writes to stream (stderr) in log_format, at level.

    As logging.basicConfig: when the root logger has a handler someone else installed (a test
    runner calling a command in-process), logging is left alone."""
    root = logging.getLogger()
    ours = [h for h in root.handlers if isinstance(h, _CommandHandler)]
    if len(ours) < len(root.handlers):
        return
    formatted = formatter(log_format, json_factory)  # a bad format fails before any change
    for old in ours:
        root.removeHandler(old)
    handler = _CommandHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatted)
    root.addHandler(handler)
    root.setLevel(level)
