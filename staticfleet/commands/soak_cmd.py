"""`staticfleet soak`: the seeded fault soak (`staticfleet.soak`, docs/soak.md)."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "soak",
        help="run a seeded fault soak of a coordinator and member processes, and check it",
        description=(
            "Start a coordinator and member processes of three groups on loopback, inject "
            "faults drawn from --seed for --duration, then check the run from its logs, "
            "journal and API samples (docs/soak.md). Exit 1 on a violation. With "
            "--coordinator kafka the groups live on a Kafka broker the soak starts."
        ),
    )
    # Imported here: `staticfleet --help` imports every command module.
    from staticfleet.soak.arguments import add_arguments

    add_arguments(parser)
    parser.set_defaults(handler=_soak, extra=None)


def _soak(args: Any) -> int:
    from staticfleet.soak.__main__ import run

    return run(args)
