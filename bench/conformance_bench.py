"""Conformance figures: scenarios and steps where our coordinator answers as a Kafka broker
(`staticfleet.conformance`), and how many differences are expected or documented; and the
consumer-protocol section (broker only): its pinned steps, failures and measured figures.

    python -m bench.run --only conformance
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from staticfleet.conformance import runner
from staticfleet.kafka.broker import KafkaBroker


def run(quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-conformance-") as workdir:
        broker = KafkaBroker(Path(workdir), class_sharing=False)
        broker.start()
        try:
            broker.wait_ready(timeout=120)
            results = asyncio.run(runner.run_all(broker.bootstrap, broker.create_topic))
            # The classic section created the topic.
            pinned = asyncio.run(runner.run_consumer_protocol(broker.bootstrap))
        finally:
            broker.stop()
    summary = runner.summary(results)
    summary["per_scenario"] = {
        r.name: {"steps": len(r.steps), "equal": len(r.steps) - len(r.differences)} for r in results
    }
    summary["consumer_protocol"] = runner.consumer_summary(pinned)
    return summary
