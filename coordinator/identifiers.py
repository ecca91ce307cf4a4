"""What a group id, member id or instance id may contain.

Kafka allows any string. We refuse control characters (Unicode category Cc: C0, DEL, C1):
a newline or NUL in an id would forge lines in the coordinator's log and in the Prometheus
exposition, and no real client needs one.
"""

from __future__ import annotations

import unicodedata


def valid_id(value: str | None) -> bool:
    """True for None (absent) and for strings without control characters."""
    return value is None or not any(unicodedata.category(char) == "Cc" for char in value)
