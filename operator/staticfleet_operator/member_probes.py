"""httpGet probes on the member's health endpoints (`staticfleet member run --health-port`,
docs/client.md, "Health endpoints"), for the containers of a member pod that serve them. Pure.

A container gets them when its command line runs `member run` and its endpoints are on: the
template's port (`STATICFLEET_HEALTH_PORT` or `--health-port`, not 0), else the operator's
default (`operator run --member-health-port`, the chart's `members.healthPort`), which is
then set as `STATICFLEET_HEALTH_PORT`. A sidecar, a Kafka client of another family or a
Spark executor serves no such endpoint. The default is the operator's, not a constant: where
pods share the host's network (`hostNetwork`, or a test harness running pods as host
processes), one fixed port would refuse every member after the first, so such a setup sets
it to 0 (off). A template's 0 turns them off for its group. A probe the template already
has is kept as it is: a user's probe wins.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Final

from coordinator.client import env

HEALTH_PORT_NAME: Final = "member-health"
LIVENESS_PATH: Final = "/livez"
READINESS_PATH: Final = "/readyz"

# Until /livez first answers (the process imports and binds within a few seconds): the
# other probes wait for it, so a slow start is neither killed nor reported refused.
STARTUP_PROBE: Final[Mapping[str, Any]] = {
    "periodSeconds": 1,
    "timeoutSeconds": 3,
    "failureThreshold": 60,
}
# The endpoint already waits for its stall limit (session + poll + 5 s) before it says
# "stuck": three failed checks 5 s apart then restart the container.
LIVENESS_PROBE: Final[Mapping[str, Any]] = {
    "periodSeconds": 5,
    "timeoutSeconds": 3,
    "failureThreshold": 3,
}
# Not ready within ~4 s of a member losing its place (lost, rebalancing); ready again at the
# first check after it is stable.
READINESS_PROBE: Final[Mapping[str, Any]] = {
    "periodSeconds": 2,
    "timeoutSeconds": 3,
    "failureThreshold": 2,
}


def runs_member(container: Mapping[str, Any]) -> bool:
    """The container's command line runs `member run` (the image's entrypoint is
    `staticfleet`; `staticfleet member run` in `command` counts as well)."""
    return any(pair == ("member", "run") for pair in itertools.pairwise(_words(container)))


def _words(container: Mapping[str, Any]) -> list[str]:
    return [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]


def _flag_port(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--health-port" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--health-port="):
            return arg.split("=", 1)[1]
    return None


def _template_port(container: Mapping[str, Any]) -> str | None:
    """The port the template sets itself (the flag wins, as in `member run`); None: unset."""
    flag = _flag_port(_words(container))
    if flag is not None:
        return flag
    for entry in container.get("env") or []:
        if entry.get("name") == env.HEALTH_PORT and "value" in entry:
            return str(entry["value"]).strip() or None
    return None


def with_health_probes(
    container: Mapping[str, Any], default_port: int | None = None
) -> dict[str, Any]:
    """A copy of `container` with a containerPort for the health endpoints and the probes
    it lacks, if it runs `member run` with the endpoints on: the template's port, else
    `default_port` (set as the container's STATICFLEET_HEALTH_PORT; None: off)."""
    result = copy.deepcopy(dict(container))
    if not runs_member(result):
        return result
    given = _template_port(result)
    if given is None and default_port:
        given = str(default_port)
        result["env"] = [*(result.get("env") or []), {"name": env.HEALTH_PORT, "value": given}]
    if given is None or not given.isdigit() or not 0 < int(given) <= 65535:
        return result  # unset or 0 (off), or a value the member refuses with a clear error
    port = int(given)
    ports = result.get("ports") or []
    if not any(p.get("containerPort") == port or p.get("name") == HEALTH_PORT_NAME for p in ports):
        result["ports"] = [
            *ports,
            {"name": HEALTH_PORT_NAME, "containerPort": port, "protocol": "TCP"},
        ]
    for key, path, timing in (
        ("startupProbe", LIVENESS_PATH, STARTUP_PROBE),
        ("livenessProbe", LIVENESS_PATH, LIVENESS_PROBE),
        ("readinessProbe", READINESS_PATH, READINESS_PROBE),
    ):
        if key not in result:
            result[key] = {"httpGet": {"path": path, "port": port}, **timing}
    return result
