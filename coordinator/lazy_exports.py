"""A package's public names, each imported from its module when first used (PEP 562).

`coordinator` and `coordinator.client` re-export their API (`from coordinator import
GroupCoordinator`), but a member process needs only the client half of it. Importing every
module with the package cost each member process about 0.1 CPU-second of imports at every
start (`python -m bench.process_start`). The standard library has no such helper; this is
the module `__getattr__` PEP 562 describes, with the package's own type-checking imports
giving mypy the names' types.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: `exports` maps each module to the names it gives."""
    module_of = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups skip __getattr__
        return value

    return __getattr__
