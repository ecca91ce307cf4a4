"""Request body decoding (issue 13): the one pass (`coordinator.wire.decode_plain`: msgspec
straight into the message's strict twin) against the full path it spares a plainly valid
body (`json.loads` under the number and text policies, the value check, then msgspec's
strict conversion; `coordinator/server/bodies.py`). Both give the same message (checked
before timing). Microseconds per body, the best of 5 `timeit` runs.

    python -m bench.run --only body_decode [--quick]
    python -m bench.body_decode [--quick]          # JSON on stdout
"""

from __future__ import annotations

import argparse
import json
import timeit
from collections.abc import Callable
from typing import Any

from coordinator.messages import HeartbeatRequest, JoinGroupRequest, OffsetCommitRequest
from coordinator.server.bodies import parse_json
from coordinator.wire import decode_plain, from_json

# A cooperative member's subscription to one topic with its owned partitions, base64.
_METADATA = "AAMAAAABAAZvcmRlcnMAAAAA" * 4


def _bodies() -> list[tuple[str, type[Any], bytes]]:
    join = {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 30_000,
        "member_id": "",
        "group_instance_id": "i-1",
        "protocol_type": "consumer",
        "protocols": [{"name": "cooperative-sticky", "metadata": _METADATA}],
    }
    commit = {
        "group_id": "g",
        "generation_id": 3,
        "member_id": "m",
        "group_instance_id": "i-1",
        "partitions": [
            {"topic": "orders", "partition": p, "committed_offset": 1_000 + p} for p in range(8)
        ],
    }
    heartbeat = {"group_id": "g", "generation_id": 3, "member_id": "m", "group_instance_id": "i-1"}
    return [
        ("join_group", JoinGroupRequest, json.dumps(join).encode()),
        ("commit_offsets_8_partitions", OffsetCommitRequest, json.dumps(commit).encode()),
        ("heartbeat", HeartbeatRequest, json.dumps(heartbeat).encode()),
    ]


def _best_us(call: Callable[[], Any], number: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=5)) / number * 1e6


def _timed(cls: type[Any], raw: bytes, number: int) -> dict[str, float]:
    return {
        "full_path_us": round(_best_us(lambda: from_json(cls, parse_json(raw)), number), 2),
        "one_pass_us": round(_best_us(lambda: decode_plain(cls, raw), number), 2),
    }


def run(quick: bool) -> dict[str, Any]:
    number = 2_000 if quick else 20_000
    results: dict[str, Any] = {"number": number, "repeat": 5, "unit": "microseconds per body"}
    for name, cls, raw in _bodies():
        once = decode_plain(cls, raw)
        if once is None or once != from_json(cls, parse_json(raw)):
            raise AssertionError(f"{name}: the one pass does not decode what the full path does")
        results[name] = _timed(cls, raw, number)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(args.quick), indent=2))


if __name__ == "__main__":
    main()
