"""`operator run`'s group-coordinator settings: Kafka's defaults, a user's values, refusals."""

from __future__ import annotations

import pytest

from staticfleet.cli import build_parser
from staticfleet.commands.operator_cmd import options_from_args


def test_the_coordinator_settings_default_to_kafkas_and_take_a_users() -> None:
    defaults = options_from_args(build_parser().parse_args(["operator", "run"]))
    # group.min.session.timeout.ms and group.initial.rebalance.delay.ms of a Kafka broker.
    assert (defaults.min_session_timeout_ms, defaults.initial_rebalance_delay_ms) == (6000, 3000)
    given = options_from_args(
        build_parser().parse_args(
            [
                "operator",
                "run",
                "--min-session-timeout-ms",
                "1000",
                "--initial-rebalance-delay-ms",
                "300",
            ]
        )
    )
    assert (given.min_session_timeout_ms, given.initial_rebalance_delay_ms) == (1000, 300)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--min-session-timeout-ms", "0"),
        ("--min-session-timeout-ms", "soon"),
        ("--initial-rebalance-delay-ms", "-5"),
        ("--initial-rebalance-delay-ms", "soon"),
    ],
)
def test_a_setting_the_coordinator_would_refuse_is_refused_at_start(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "run", flag, value])
    assert flag in capsys.readouterr().err


def test_no_initial_delay_is_a_setting() -> None:
    args = build_parser().parse_args(["operator", "run", "--initial-rebalance-delay-ms", "0"])
    assert options_from_args(args).initial_rebalance_delay_ms == 0
