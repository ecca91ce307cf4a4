"""Which variant a soak is and what it may inject: refused before anything starts."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from staticfleet.soak.driver import GroupHost, Soak, SoakConfig, SoakError
from staticfleet.soak.plan import FaultKind


def _no_host(config: SoakConfig, store: Path, tokens: Mapping[str, str]) -> GroupHost:
    raise AssertionError("a refused soak makes no host")


def test_the_operator_variant_needs_the_host_e2e_gives_it(tmp_path: Path) -> None:
    config = SoakConfig(seed=1, duration_s=1, run_dir=tmp_path / "a", coordinator="operator")
    with pytest.raises(SoakError, match=r"python -m e2e\.soak_operator"):
        Soak(config)
    # And a host is the operator variant's only.
    embedded = SoakConfig(seed=1, duration_s=1, run_dir=tmp_path / "b")
    with pytest.raises(SoakError, match=r"e2e\.soak_operator"):
        Soak(embedded, _no_host)


@pytest.mark.parametrize(
    ("coordinator", "kind"),
    [
        ("operator", FaultKind.COORDINATOR_KILL),  # the operator's kill is that variant's
        ("operator", FaultKind.BROKER_PAUSE_LONG),
        ("embedded", FaultKind.OPERATOR_KILL),
        ("embedded", FaultKind.APISERVER_RESTART),
        ("kafka", FaultKind.APISERVER_RESTART),
        ("kafka", FaultKind.COORDINATOR_PAUSE_SHORT),
    ],
)
def test_a_kind_with_nothing_to_aim_at_in_the_variant_is_refused(
    tmp_path: Path, coordinator: str, kind: FaultKind
) -> None:
    config = SoakConfig(
        seed=1,
        duration_s=1,
        run_dir=tmp_path / "run",
        deck=(FaultKind.MEMBER_KILL, kind),
        coordinator=coordinator,  # type: ignore[arg-type]
    )
    with pytest.raises(SoakError, match=f"not kinds of the {coordinator} variant: {kind.value}"):
        Soak(config, _no_host if coordinator == "operator" else None)
