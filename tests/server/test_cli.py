"""Pieces of `staticfleet coordinator serve` that need no process."""

from __future__ import annotations

import pytest

from staticfleet.commands.coordinator_cmd import parse_topics


def test_parse_topics() -> None:
    assert parse_topics("") == {}
    assert parse_topics("orders=48, payments=6,") == {"orders": 48, "payments": 6}
    assert parse_topics("old=0") == {"old": 0}


@pytest.mark.parametrize(
    "text", ["orders", "orders=", "=3", "orders=-1", "bad name=3", "x=1.5", "a/b=1"]
)
def test_parse_topics_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_topics(text)
