"""`staticfleet coordinator serve` with its garbage-collection pauses recorded.

    python bench/serve_probe.py GC_REPORT.json coordinator serve ...

Run as a script (not `-m`), so that with PYTHONPATH pointing at another checkout it serves
that checkout's code: bench/capacity.py measures a baseline commit this way. Every
collection's pause is timed by a `gc.callbacks` hook; on exit the report holds, per
generation, the count, total and longest pause (wall time, and the CPU time the collection
itself took: on a loaded machine wall time includes time the core was given to others),
and every pause of 1 ms or more with when it happened (to match measurement windows).
"""

from __future__ import annotations

import atexit
import gc
import json
import sys
import time
from typing import Any

LOGGED_PAUSE_S = 0.001


class PauseRecorder:
    def __init__(self) -> None:
        self.started = 0.0
        self.started_cpu = 0.0
        self.longest_cpu_s = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self.total_s = [0.0, 0.0, 0.0]
        self.longest_s = [0.0, 0.0, 0.0]
        self.long_pauses: list[tuple[float, int, float, float]] = []

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
            self.started_cpu = time.thread_time()
            return
        pause = time.perf_counter() - self.started
        # The CPU the collection took: wall time also counts any time the scheduler gave
        # the core to another process meanwhile.
        cpu = time.thread_time() - self.started_cpu
        generation = int(info["generation"])
        self.count[generation] += 1
        self.total_s[generation] += pause
        self.longest_s[generation] = max(self.longest_s[generation], pause)
        self.longest_cpu_s[generation] = max(self.longest_cpu_s[generation], cpu)
        if pause >= LOGGED_PAUSE_S:
            self.long_pauses.append((time.time(), generation, pause, cpu))

    def report(self) -> dict[str, Any]:
        return {
            "generations": [
                {
                    "generation": generation,
                    "collections": self.count[generation],
                    "total_ms": round(self.total_s[generation] * 1000, 2),
                    "longest_ms": round(self.longest_s[generation] * 1000, 3),
                    "longest_cpu_ms": round(self.longest_cpu_s[generation] * 1000, 3),
                }
                for generation in range(3)
            ],
            "longest_ms": round(max(self.longest_s) * 1000, 3),
            "longest_cpu_ms": round(max(self.longest_cpu_s) * 1000, 3),
            "pauses_over_1ms": [
                {
                    "unix_ms": int(at * 1000),
                    "generation": gen,
                    "ms": round(pause * 1000, 3),
                    "cpu_ms": round(cpu * 1000, 3),
                }
                for at, gen, pause, cpu in self.long_pauses
            ],
            "frozen_objects": gc.get_freeze_count(),
        }


def main() -> int:
    report_path, *argv = sys.argv[1:]
    recorder = PauseRecorder()
    gc.callbacks.append(recorder)

    def write() -> None:
        with open(report_path, "w", encoding="utf-8") as out:
            json.dump(recorder.report(), out)

    atexit.register(write)
    from staticfleet.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
