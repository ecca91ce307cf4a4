"""Why a container cannot start yet: the exceptions the pod worker retries on."""

from __future__ import annotations


class ConfigError(Exception):
    """A container cannot start yet: a Secret/ConfigMap (key) it needs is missing."""


class VolumeError(Exception):
    """A volume cannot be set up yet (e.g. its Secret does not exist)."""
