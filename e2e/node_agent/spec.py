"""Kubernetes semantics as pure functions: the image, argv, ``$(VAR)`` expansion, paths,
the downward API, quantities and probes, computed from pod objects without any I/O."""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

# The staticfleet image's Dockerfile: ENTRYPOINT ["staticfleet"], CMD ["operator", "run"].
IMAGE_NAME = "staticfleet"
IMAGE_ENTRYPOINT = ("staticfleet",)
IMAGE_CMD = ("operator", "run")
SA_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# The agent's own variables a process keeps (there is no image environment to supply them).
KEPT_ENV_NAMES = ("PATH", "HOME")
KEPT_ENV_PREFIXES = ("PYTHON",)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: ``$$`` escapes a ``$``; an unknown or unterminated
    reference stays literal (k8s.io/kubernetes third_party/forked/golang/expansion)."""
    out: list[str] = []
    i, n = 0, len(value)
    while i < n:
        ch = value[i]
        if ch != "$" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = value[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = value.find(")", i + 2)
            if close < 0:
                out.append("$(")
                i += 2
            else:
                name = value[i + 2 : close]
                out.append(env.get(name, f"$({name})"))
                i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def image_repository_name(image: str) -> str:
    """The last path component of an image's repository: ``ghcr.io/x/staticfleet:1`` →
    ``staticfleet`` (a registry port such as ``host:5000/...`` is not a tag)."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def image_runnable(image: str) -> bool:
    return image_repository_name(image) == IMAGE_NAME


def unrunnable_message(image: str) -> str:
    return (
        f"image {image} cannot run on the e2e node agent: it runs only the "
        f"{IMAGE_NAME} image as local processes"
    )


def container_argv(container: Mapping[str, Any]) -> list[str]:
    """Docker/Kubernetes semantics: ``command`` replaces the ENTRYPOINT (and drops the CMD),
    ``args`` replace the CMD."""
    command = container.get("command")
    args = container.get("args")
    if command:
        return [*command, *(args or [])]
    return [*IMAGE_ENTRYPOINT, *(args if args is not None else IMAGE_CMD)]


def map_executable(argv: list[str], executable: Path) -> list[str]:
    """Run the image's programs from the venv: ``staticfleet`` (also by absolute path) is the
    venv's console script; ``python``/``python3`` the venv's interpreter."""
    if not argv:
        return argv
    base = os.path.basename(argv[0])
    if base == IMAGE_NAME:
        return [str(executable), *argv[1:]]
    if base in ("python", "python3"):
        return [str(executable.parent / "python"), *argv[1:]]
    return argv


# A value that is a path, optionally behind a ``--flag=`` and/or a ``scheme://`` prefix.
_PATHLIKE = re.compile(
    r"^(?P<flag>--?[A-Za-z0-9][A-Za-z0-9_.-]*=)?(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)?"
    r"(?P<path>/.*)$",
    re.DOTALL,
)


def rewrite_path(value: str, mounts: Sequence[tuple[str, Path]]) -> str:
    """Point a container path at its host directory: there is no container filesystem.

    ``mounts`` is ``(mountPath, host dir)``, longest mountPath first. A value is rewritten when
    it starts with a mountPath (``/data/x.db``), or has it right after ``scheme://``
    (``sqlite:///data/x.db``) or after a ``--flag=`` (``--webhook-cert=/certs/tls.crt``).
    """
    m = _PATHLIKE.match(value)
    if not m:
        return value
    path = m["path"]
    for mount_path, host in mounts:
        mp = mount_path.rstrip("/")
        if mp and (path == mp or path.startswith(mp + "/")):
            return f"{m['flag'] or ''}{m['scheme'] or ''}{host}{path[len(mp) :]}"
    return value


def longest_first(mounts: Iterable[tuple[str, Path]]) -> list[tuple[str, Path]]:
    return sorted(mounts, key=lambda m: len(m[0].rstrip("/")), reverse=True)


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


def field_ref(pod: Mapping[str, Any], path: str, node_ip: str) -> str | None:
    """A downward API fieldRef; None when the field is unset (or unsupported)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    m = _SUBSCRIPT.match(path)
    if m:
        value = (meta.get(m[1]) or {}).get(m[2])
        return None if value is None else str(value)
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": node_ip,
        "status.hostIPs": node_ip,
        "status.podIP": node_ip,
        "status.podIPs": node_ip,
    }
    if path in ("metadata.labels", "metadata.annotations"):
        items = sorted((meta.get(path.split(".")[1]) or {}).items())
        return "\n".join(f'{k}="{v}"' for k, v in items)
    value = simple.get(path)
    return None if value is None else str(value)


_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def parse_quantity(q: str | int | float) -> float:
    m = _QUANTITY.match(str(q).strip())
    if not m or m[2] not in _SUFFIX:
        raise ValueError(f"not a quantity: {q!r}")
    return float(m[1]) * _SUFFIX[m[2]]


def resource_field(
    container: Mapping[str, Any], ref: Mapping[str, Any], allocatable: Mapping[str, str]
) -> str:
    """An approximate resourceFieldRef: the container's request/limit (limits default to the
    node's allocatable), divided by ``divisor`` and rounded up, as the kubelet does."""
    kind, _, resource = str(ref.get("resource", "")).partition(".")
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(resource)
    if raw is None and kind == "requests":
        raw = (resources.get("limits") or {}).get(resource, "0")
    if raw is None:
        raw = allocatable.get(resource, "0")
    divisor = parse_quantity(ref.get("divisor") or "1") or 1.0
    return str(math.ceil(parse_quantity(raw) / divisor))


def exit_code_of(returncode: int) -> int:
    # Like a container runtime: death by signal N is exit code 128+N.
    return returncode if returncode >= 0 else 128 - returncode


def probe_port(port: Any, container: Mapping[str, Any]) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    text = str(port)
    if text.isdigit():
        return int(text)
    for p in container.get("ports") or []:
        if p.get("name") == text:
            return int(p["containerPort"])
    raise ValueError(f"container {container.get('name')} has no port named {text!r}")


def kept_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v for k, v in environ.items() if k in KEPT_ENV_NAMES or k.startswith(KEPT_ENV_PREFIXES)
    }


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _phase_done(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
