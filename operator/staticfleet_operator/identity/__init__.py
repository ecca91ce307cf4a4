"""Stable member identities: slot allocation, scale-down planning, rebuild after restart."""

from staticfleet_operator.identity.allocator import Persist, SlotAllocator, SlotGrant
from staticfleet_operator.identity.slots import (
    Rebuilt,
    SlotClaim,
    SlotConflict,
    SlotTable,
    SlotTakenError,
    plan_scale_down,
    rebuild,
)

__all__ = [
    "Persist",
    "Rebuilt",
    "SlotAllocator",
    "SlotClaim",
    "SlotConflict",
    "SlotGrant",
    "SlotTable",
    "SlotTakenError",
    "plan_scale_down",
    "rebuild",
]
