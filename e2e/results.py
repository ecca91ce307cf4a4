"""e2e/results.json: one session's scenarios merged into what earlier sessions recorded.

A session that runs a few scenarios (`make e2e-node`, one file) must not drop the figures of
the ones it did not run: it replaces the entries of its own scenarios, keeps the others, and
stamps each entry it writes with the session's end, so the file says which run gave what.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

# Written by each session as a whole (the last session's), unlike the per-scenario entries.
SESSION_KEYS = ("cluster", "finished", "machine", "session_seconds", "build", "session")


def merged(
    previous: dict[str, Any] | None,
    session: dict[str, Any],
    known: Collection[str] | None = None,
) -> dict[str, Any]:
    """`previous` (the file as it was, or None) with `session`'s top-level figures and its
    scenarios, each stamped `finished`, replacing the entries of the same names; with
    `known` (the scenarios that still exist), earlier entries of removed scenarios go."""
    result: dict[str, Any] = dict(previous or {})
    result.update({key: session[key] for key in SESSION_KEYS if key in session})
    if "first_build_cold" in session and session["first_build_cold"] is not None:
        result["first_build_cold"] = session["first_build_cold"]
    scenarios = {
        name: entry
        for name, entry in (result.get("scenarios") or {}).items()
        if known is None or name in known
    }
    for name, entry in session.get("scenarios", {}).items():
        scenarios[name] = {**entry, "finished": session["finished"]}
    result["scenarios"] = dict(sorted(scenarios.items()))
    return result
