"""The `staticfleet` command: one entry point, subcommands registered by the modules that own them.

Each subcommand module exposes `register(subparsers)`; imports are light so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# (top-level command, module providing `register(subparsers)` for it)
SUBCOMMAND_MODULES: list[tuple[str, str]] = [
    ("coordinator", "staticfleet.commands.coordinator_cmd"),
    ("member", "staticfleet.commands.member_cmd"),
    ("demo", "staticfleet.commands.demo_cmd"),
    ("crds", "staticfleet.commands.crds_cmd"),
    ("spark", "staticfleet.commands.spark_cmd"),
    ("operator", "staticfleet.commands.operator_cmd"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="staticfleet",
        description="Static-membership consumer fleets: coordinator, members, operator, demo.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for _name, module_name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            # A subcommand whose optional extra is not installed is simply absent.
            if error.name and module_name.startswith(error.name):
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = args.handler
    result: int = handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
