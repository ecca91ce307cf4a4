"""`staticfleet soak --seed N --duration 30m --report bench/results/soak.json` (also
`python -m staticfleet.soak`): run the fault soak, judge it, write the report; exit 1 when
the checker found a violation, 2 when the soak could not run."""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from staticfleet.demo.fleet import FleetError
from staticfleet.kafka.broker import BrokerError
from staticfleet.soak.arguments import add_arguments
from staticfleet.soak.checker import check, load_run
from staticfleet.soak.driver import HostFactory, Soak, SoakConfig, SoakError


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: Any, make_host: HostFactory | None = None) -> int:
    """Run (unless --check-only) and judge; `make_host` gives the operator variant's host
    (e2e/soak_operator.py)."""
    run_dir: Path = args.run_dir or Path(tempfile.mkdtemp(prefix="staticfleet-soak-"))
    if args.check_only and args.run_dir is None:
        print("soak: --check-only needs --run-dir", file=sys.stderr)
        return 2
    if not args.check_only:
        # SIGTERM unwinds like Ctrl-C, so the driver's cleanup runs (namespaces, links, the
        # store's mount: docs/soak.md).
        signal.signal(signal.SIGTERM, _interrupted)
        try:
            config = SoakConfig(
                seed=args.seed,
                duration_s=args.duration,
                run_dir=run_dir,
                coordinator="operator" if make_host is not None else args.coordinator,
            )
            Soak(config, make_host).run(progress=lambda line: print(line, flush=True))
        except (SoakError, FleetError, BrokerError, RuntimeError) as error:
            print(f"soak: {error}", file=sys.stderr)
            return 2
    report = check(load_run(run_dir))
    report["run_dir"] = str(run_dir)
    report["machine"] = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python_version": platform.python_version(),
    }
    report["checked_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    text = json.dumps(report, indent=2, sort_keys=True) + "\n"
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(text)
    print(text)
    return 1 if report["violations_total"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m staticfleet.soak", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
