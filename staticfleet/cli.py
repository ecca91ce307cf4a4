"""The `staticfleet` command: one entry point, subcommands registered by the modules that own them.

Each subcommand module exposes `register(subparsers)`; imports are light so `--help` stays fast,
and registering needs no optional extra: every command is listed on the base install. A command
whose extra is missing stops with one line naming the extra to install (`EXTRA_OF_MODULE`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

# (top-level command, module providing `register(subparsers)` for it)
SUBCOMMAND_MODULES: list[tuple[str, str]] = [
    ("coordinator", "staticfleet.commands.coordinator_cmd"),
    ("member", "staticfleet.commands.member_cmd"),
    ("demo", "staticfleet.commands.demo_cmd"),
    ("crds", "staticfleet.commands.crds_cmd"),
    ("spark", "staticfleet.commands.spark_cmd"),
    ("operator", "staticfleet.commands.operator_cmd"),
    ("soak", "staticfleet.commands.soak_cmd"),
]

EXIT_MISSING_EXTRA = 2

# The top-level package a command imports when it runs -> the extra of pyproject.toml that
# installs it (kept in step with [project.optional-dependencies] by a test).
EXTRA_OF_MODULE: dict[str, str] = {
    "kopf": "operator",
    "yaml": "operator",
    "pyspark": "spark",
    "matplotlib": "demo",
    "confluent_kafka": "kafka",
}


def package_version() -> str:
    try:
        return version("staticfleet")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="staticfleet",
        description="Static-membership consumer fleets: coordinator, members, operator, demo.",
    )
    parser.add_argument("--version", action="version", version=f"staticfleet {package_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for _name, module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def _importable(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except ModuleNotFoundError:
        return False


def extra_message(extra: str, package: str) -> str:
    return (
        f"staticfleet: this command needs the `{extra}` extra (no module named {package!r}): "
        f"pip install 'staticfleet[{extra}]'"
    )


def check_extra(extra: str | None) -> str | None:
    """Before a command runs: the one-line answer when its extra is missing, else None."""
    for package, of_extra in EXTRA_OF_MODULE.items():
        if of_extra == extra and not _importable(package):
            return extra_message(extra, package)
    return None


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """The same answer for an import that fails while a command runs, else None."""
    package = (error.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(package)
    return extra_message(extra, package) if extra is not None else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = args.handler
    # Checked before the command starts (the demo would otherwise run for minutes first).
    message = check_extra(getattr(args, "extra", None))
    if message is None:
        try:
            result: int = handler(args)
        except ModuleNotFoundError as error:
            message = missing_extra(error)
            if message is None:
                raise
    if message is not None:
        print(message, file=sys.stderr)
        return EXIT_MISSING_EXTRA
    return result


if __name__ == "__main__":
    sys.exit(main())
