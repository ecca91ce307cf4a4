"""Unit-test the chart's alerting rules with promtool: `helm template` → rule file → tests.

    helm template sf charts/staticfleet --set metrics.prometheusRule.enabled=true \
        | python scripts/check_rules.py [--promtool build/bin/promtool]

The PrometheusRule's `spec` is a Prometheus rule file as is; it is written next to the tests
in tests/operator/promtool/*.test.yaml (which name it `rules.yaml`), then
`promtool check rules` and `promtool test rules` run on them. promtool is built from its Go
module by `scripts/build-go-tool.sh promtool` (tools/promtool/go.mod). Exits with promtool's
status, 1 when the input holds no PrometheusRule.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests" / "operator" / "promtool"
RULE_FILE = "rules.yaml"


def rule_groups(text: str) -> list[dict[str, object]]:
    """Every group of every PrometheusRule in a multi-document manifest."""
    groups: list[dict[str, object]] = []
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and doc.get("kind") == "PrometheusRule":
            groups.extend(doc["spec"]["groups"])
    return groups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--promtool", default=str(ROOT / "build" / "bin" / "promtool"))
    args = parser.parse_args(argv)
    groups = rule_groups(sys.stdin.read())
    if not groups:
        print("check_rules: no PrometheusRule in the input", file=sys.stderr)
        return 1
    tests = sorted(TESTS.glob("*.test.yaml"))
    with tempfile.TemporaryDirectory(prefix="staticfleet-rules-") as scratch:
        work = Path(scratch)
        (work / RULE_FILE).write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
        for test in tests:
            shutil.copy(test, work / test.name)
        for command in (
            [args.promtool, "check", "rules", RULE_FILE],
            [args.promtool, "test", "rules", *(t.name for t in tests)],
        ):
            proc = subprocess.run(command, cwd=work, check=False)
            if proc.returncode != 0:
                return proc.returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
