"""A small node agent for the end-to-end tests: it stands in for the kubelet.

It registers a Node, binds pending pods to it (there is no scheduler), and runs each pod's
containers as local ``staticfleet`` processes with the environment a kubelet would resolve
(including whatever admission webhooks injected into the pod). It reports the pod status
(phase, conditions, containerStatuses, probes) and on deletion stops the processes within the
grace period before finishing the deletion. See e2e/README.md, "Node agent".

What it does NOT pretend: there are no images, no container runtime, no filesystem or network
namespaces. Only the ``staticfleet`` image can run (as the venv's ``staticfleet`` executable);
every pod shares the node's IP and ports; paths under a volumeMount's mountPath in
command/args/env are rewritten to a per-pod host directory; a ServiceAccount token mount is
turned into a kubeconfig file (``KUBECONFIG``) because the in-cluster token path does not exist.

    python -m e2e.node_agent --kubeconfig PATH --workdir DIR [--node-name e2e-node] [--node-ip IP]
"""

from __future__ import annotations

from e2e.node_agent.agent import NodeAgent
from e2e.node_agent.cli import amain, main, parse_args
from e2e.node_agent.container import ContainerRunner, ContainerStatus
from e2e.node_agent.errors import ConfigError, VolumeError
from e2e.node_agent.host import first_ipv4, memory_bytes
from e2e.node_agent.pod import PodWorker
from e2e.node_agent.spec import (
    IMAGE_CMD,
    IMAGE_ENTRYPOINT,
    IMAGE_NAME,
    SA_MOUNT_PATH,
    container_argv,
    exit_code_of,
    expand,
    field_ref,
    image_repository_name,
    image_runnable,
    kept_environment,
    longest_first,
    map_executable,
    now_iso,
    now_micro,
    parse_quantity,
    probe_port,
    resource_field,
    rewrite_path,
    unrunnable_message,
)

__all__ = [
    "IMAGE_CMD",
    "IMAGE_ENTRYPOINT",
    "IMAGE_NAME",
    "SA_MOUNT_PATH",
    "ConfigError",
    "ContainerRunner",
    "ContainerStatus",
    "NodeAgent",
    "PodWorker",
    "VolumeError",
    "amain",
    "container_argv",
    "exit_code_of",
    "expand",
    "field_ref",
    "first_ipv4",
    "image_repository_name",
    "image_runnable",
    "kept_environment",
    "longest_first",
    "main",
    "map_executable",
    "memory_bytes",
    "now_iso",
    "now_micro",
    "parse_args",
    "parse_quantity",
    "probe_port",
    "resource_field",
    "rewrite_path",
    "unrunnable_message",
]
