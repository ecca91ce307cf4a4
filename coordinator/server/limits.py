"""Bounds the server enforces on input, shared by the validators and the OpenAPI document."""

from __future__ import annotations

from typing import Final

# SQLite stores integers as signed 64-bit; a wider JSON number must be refused at the door,
# not fail half-way through a store write.
INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**63 - 1

# Largest request body, unless configured otherwise (aiohttp's client_max_size).
DEFAULT_MAX_BODY_BYTES: Final = 4 * 1024 * 1024

# Journal pages: a reader pages with `since`, so one response stays bounded.
JOURNAL_DEFAULT_LIMIT: Final = 1000
JOURNAL_MAX_LIMIT: Final = 10_000
