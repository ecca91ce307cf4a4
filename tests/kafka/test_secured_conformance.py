"""The conformance runner against the secured broker's SASL_SSL listener (`--kafka-config`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from staticfleet.conformance import runner
from staticfleet.conformance.scenarios import TOPIC_PARTITIONS
from staticfleet.kafka.broker import KafkaBroker

pytestmark = pytest.mark.kafka


def test_the_runner_reaches_a_secured_listener(
    kafka_broker: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The broker's admin user (a super user: the conformance groups are made up as it runs).
    config = tmp_path / "sasl.properties"
    config.write_text(
        "".join(f"{k}={v}\n" for k, v in kafka_broker.client_properties("SASL_SSL").items()),
        encoding="utf-8",
    )
    if runner.TOPIC not in kafka_broker.admin().list_topics(timeout=10).topics:
        kafka_broker.create_topic(runner.TOPIC, TOPIC_PARTITIONS)
    code = runner.main(
        [
            "--bootstrap",
            kafka_broker.sasl_ssl_bootstrap,
            "--kafka-config",
            str(config),
            "static_join_and_rejoin",
            "batch_leave_mixed",
        ]
    )
    output = capsys.readouterr().out
    summary = json.loads(output.strip().splitlines()[-1])
    assert code == 0, output
    assert summary["scenarios"] == 2 and summary["steps"] > 0, output


def test_a_bad_settings_file_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "bad.properties"
    config.write_text("security.protocol=SASL_SSL\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_:
        runner.main(["--bootstrap", "127.0.0.1:1", "--kafka-config", str(config)])
    assert exit_.value.code == 2
