"""`staticfleet coordinator serve` under cProfile, switched on and off by signals.

    python bench/signal_profile.py PROFILE.pstats coordinator serve ...

SIGUSR1 starts profiling the event loop's thread, SIGUSR2 stops it and writes the stats to
PROFILE.pstats: a bench profiles just the span it measures (bench/leader_sync.py --profile),
not the server's start or the group's formation. Run as a script, as bench/serve_probe.py.
"""

from __future__ import annotations

import cProfile
import signal
import sys
from typing import Any


def main() -> int:
    stats_path, *argv = sys.argv[1:]
    profiler = cProfile.Profile()

    def stop(*_: Any) -> None:
        profiler.disable()
        profiler.dump_stats(stats_path)

    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
    signal.signal(signal.SIGUSR2, stop)
    from staticfleet.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
