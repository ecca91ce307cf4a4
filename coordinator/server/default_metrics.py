"""The series every staticfleet registry carries: process, platform and build info.

The coordinator's server and the operator each keep a registry of their own (never the
global one), so prometheus_client's default collectors (`process_*`, `python_info`) are not
there unless registered. `operator run` hands the server's registry to the operator's
metrics, so both register into one registry: `register_defaults` adds the collectors to a
registry once, however many callers ask.
"""

from __future__ import annotations

import platform
import weakref
from collections.abc import Iterator
from importlib import metadata
from typing import Final

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

BUILD_INFO: Final = "staticfleet_build_info"
DISTRIBUTION: Final = "staticfleet"

# Registries already holding the defaults; weak, so a test's registry can go.
_done: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()


def version() -> str:
    """The installed staticfleet distribution's version ("unknown" when run from sources)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


class BuildInfoCollector(Collector):
    """`staticfleet_build_info{version, python}` = 1: which build a target runs, for joins
    (`* on (instance) group_left(version) staticfleet_build_info`) and upgrade dashboards."""

    def __init__(self, build_version: str | None = None) -> None:
        self._labels = [build_version or version(), platform.python_version()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            BUILD_INFO,
            "The staticfleet version and Python version this process runs (always 1)",
            labels=["version", "python"],
        )
        family.add_metric(self._labels, 1)
        yield family


def register_defaults(registry: CollectorRegistry) -> None:
    """Add process_*, python_info and staticfleet_build_info to the registry, once."""
    if registry in _done:
        return
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    registry.register(BuildInfoCollector())
    _done.add(registry)
