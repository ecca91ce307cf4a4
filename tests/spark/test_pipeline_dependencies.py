"""The pipeline runs on Spark executors with the member runtime and the journal's own
definitions only: neither the CLI nor the demo is imported there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from pipeline import analytics, columnar, executor_members, figures, generate, options, reference
settings = executor_members._member_settings({
    "STATICFLEET_COORDINATOR_URL": "http://x",
    "STATICFLEET_GROUP_ID": "g",
    "STATICFLEET_TOPICS": "t",
})
assert settings.commit_interval_ms == 500, settings.commit_interval_ms
print("\\n".join(sorted(sys.modules)))
"""

FORBIDDEN = ("staticfleet.cli", "staticfleet.commands", "staticfleet.demo")


def test_the_pipeline_imports_neither_the_cli_nor_the_demo() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True
    )
    modules = done.stdout.split()
    assert "staticfleet.member.settings" in modules and "coordinator.journal_metrics" in modules
    assert [m for m in modules if m.startswith(FORBIDDEN)] == []
