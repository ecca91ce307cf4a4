"""Schemathesis hooks for `test_schemathesis.py` (loaded through SCHEMATHESIS_HOOKS).

The protocol routes require the body's group_id to equal the path's. Generated positive
cases draw the two independently, so nearly all would stop at that check; copying the path
value into the body lets them reach the coordinator. Negative cases are left alone.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import schemathesis
from schemathesis import GenerationMode


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    group_id = (case.path_parameters or {}).get("group_id")
    positive = case.meta is None or case.meta.generation.mode == GenerationMode.POSITIVE
    if positive and isinstance(case.body, dict) and "group_id" in case.body and group_id:
        # Path parameters arrive percent-encoded; and the body dict may be shared with
        # other cases, so it is replaced, not changed in place.
        case.body = {**case.body, "group_id": unquote(group_id)}
    return case
