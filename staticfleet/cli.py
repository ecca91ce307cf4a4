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
from typing import Any

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
    from importlib.metadata import PackageNotFoundError, version  # see VersionAction

    try:
        return version("staticfleet")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


class VersionAction(argparse.Action):
    """`--version`, with the version read only when asked: importlib.metadata and the search
    for the package's metadata would otherwise cost every start of every process."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        print(f"staticfleet {package_version()}")  # to stdout, as argparse's own action
        parser.exit()


def modules_to_register(argv: Sequence[str] | None) -> list[str]:
    """The subcommand modules a parser for `argv` needs: only the named command's, if it names one.

    Every command module imports what its command runs with (the member's client, the
    coordinator's server, the operator's Kopf), so registering all seven costs each member
    process about half a CPU-second of imports it never uses. With no command named (or
    `--help`, or a misspelt one) all are registered, so the usage lists every command.
    """
    first = next((word for word in (argv or []) if not word.startswith("-")), None)
    named = [module for name, module in SUBCOMMAND_MODULES if name == first]
    return named or [module for _name, module in SUBCOMMAND_MODULES]


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser; given `argv`, only what parsing that argv needs."""
    parser = argparse.ArgumentParser(
        prog="staticfleet",
        description="Static-membership consumer fleets: coordinator, members, operator, demo.",
    )
    parser.add_argument("--version", action=VersionAction, help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module_name in modules_to_register(argv):
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
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(words).parse_args(words)
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
