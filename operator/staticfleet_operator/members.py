"""Member pods as data: what the operator stamps on a pod, and how it reads a pod back. Pure.

A member pod carries its identity and the settings it was created with as labels and
annotations (the orchestrator and the slot table are rebuilt from them after a restart),
and the member environment (`coordinator.client.env` names) the member process reads.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.crd import ClientEnvNames, ConsumerGroupSpec
from staticfleet_operator.kafka_clients import (
    client_config_mount,
    client_env_from,
    kafka_member_env,
)
from staticfleet_operator.member_probes import with_health_probes
from staticfleet_operator.owned import GROUP_LABEL, MANAGED_BY, MANAGED_BY_LABEL, group_owner
from staticfleet_operator.rollout import MemberPod
from staticfleet_operator.tokens import token_secret_ref

SLOT_LABEL: Final = "staticfleet.dev/slot"

SLOT_ANNOTATION: Final = "staticfleet.dev/slot"
INSTANCE_ID_ANNOTATION: Final = "staticfleet.dev/instance-id"
PROTOCOL_ANNOTATION: Final = "staticfleet.dev/protocol"
TEMPLATE_HASH_ANNOTATION: Final = "staticfleet.dev/template-hash"
# Stable for the pod's whole life and known at admission (unlike uid or a generated name).
POD_KEY_ANNOTATION: Final = "staticfleet.dev/pod-key"

# Env the operator owns; a template's own values for these names are replaced.
MEMBER_ENV_NAMES: Final = frozenset({*env.ALL, env.COORDINATOR_CA_FILE, env.TOKEN_FILE})

# An https:// coordinator's CA bundle, in each member namespace (a Secret cannot be mounted
# from the operator's namespace): a ConfigMap with key ca.crt (docs/server.md, "TLS").
COORDINATOR_CA_CONFIGMAP: Final = "staticfleet-coordinator-ca"
COORDINATOR_CA_VOLUME: Final = "staticfleet-coordinator-ca"
COORDINATOR_CA_DIR: Final = "/etc/staticfleet/coordinator-ca"
COORDINATOR_CA_KEY: Final = "ca.crt"
# Members known by their pod (docs/server.md): one projected volume holds the pod's
# ServiceAccount token for the coordinator's audience (and, for https://, the CA bundle).
COORDINATOR_VOLUME: Final = "staticfleet-coordinator"
COORDINATOR_DIR: Final = "/etc/staticfleet/coordinator"
TOKEN_KEY: Final = "token"
# The kubelet rotates the token at 80 % of this; the API server's minimum is 600 s.
TOKEN_EXPIRATION_SECONDS: Final = 3600
# A pod's terminationGracePeriodSeconds when its spec sets none (core/v1's default).
DEFAULT_GRACE_SECONDS: Final = 30


@dataclass(frozen=True, slots=True)
class MemberSettings:
    """What the operator knows beyond the spec when it configures a member."""

    coordinator_url: str
    group_name: str  # the ConsumerGroup's metadata.name (the group label's value)
    # Set: members present their pod's ServiceAccount token for this audience (read from a
    # projected volume) instead of the group's token Secret; the embedded coordinator only.
    token_audience: str | None = None
    # The member's health port where the template sets none (`--member-health-port`); None:
    # the endpoints and probes only where the template turns them on (member_probes).
    member_health_port: int | None = None


def template_hash(spec: ConsumerGroupSpec, token_audience: str | None = None) -> str:
    """Hash of everything a member pod is created from except its slot and protocol: the
    template and the injected settings (`token_audience`: the operator's pod identity, which
    decides the token env and the pod's volumes). A change means members must be recreated."""
    material = {
        "template": spec.template.model_dump(mode="json", by_alias=True) if spec.template else None,
        "groupId": spec.group_id,
        "topics": sorted(topic.name for topic in spec.topics),
        "assignors": [spec.rebalance.eager_assignor.value, spec.rebalance.cooperative_assignor],
        "sessionTimeoutMs": spec.membership.session_timeout_ms,
        "rebalanceTimeoutMs": spec.membership.rebalance_timeout_ms,
        # Where STATICFLEET_TOKEN comes from: the user's Secret, or the operator-made one.
        "token": (
            spec.token_secret_ref.model_dump(mode="json") if spec.token_secret_ref else "managed"
        ),
    }
    if spec.coordinator.is_kafka:
        # Only for Kafka groups: adding a key would change every embedded fleet's hash and
        # bounce it on an operator upgrade.
        coordinator = spec.coordinator.model_dump(mode="json", by_alias=True)
        # Fields added later count only when set: an operator upgrade must not change the
        # hash of (and bounce) fleets that do not use them.
        if coordinator.get("kafka") is None:
            coordinator.pop("kafka", None)
        if coordinator["env"].get("clientConfig") == ClientEnvNames().client_config:
            coordinator["env"].pop("clientConfig")
        material["coordinator"] = coordinator
    elif token_audience:
        # Only when set, so fleets that never used pod identity keep their hash; turning it
        # on or off recreates the pods, whose env and volumes are fixed at creation (a pod
        # left with a token file after it is turned off would be refused for good).
        material["podTokenAudience"] = token_audience
    digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
    return digest[:10]


def member_env(
    spec: ConsumerGroupSpec,
    settings: MemberSettings,
    instance_id: str,
    protocol: RebalanceProtocolSetting,
    *,
    group_token: bool = False,
) -> list[dict[str, Any]]:
    """The env entries (core/v1 EnvVar) a member process is configured by. `group_token`:
    the group's token even under pod identity (a standby: its pod holds no instance id, so
    the coordinator could not bind its pod token to any member of the group)."""
    if spec.coordinator.is_kafka:
        return kafka_member_env(spec, instance_id, protocol)
    values = {
        env.COORDINATOR_URL: settings.coordinator_url,
        env.GROUP_ID: spec.group_id,
        env.INSTANCE_ID: instance_id,
        env.TOPICS: ",".join(topic.name for topic in spec.topics),
        env.REBALANCE_PROTOCOL: protocol.value,
        env.EAGER_ASSIGNOR: spec.rebalance.eager_assignor.value,
        env.COOPERATIVE_ASSIGNOR: spec.rebalance.cooperative_assignor.value,
        env.SESSION_TIMEOUT_MS: str(spec.membership.session_timeout_ms),
        env.REBALANCE_TIMEOUT_MS: str(spec.membership.rebalance_timeout_ms),
    }
    entries: list[dict[str, Any]] = [
        {"name": name, "value": value} for name, value in values.items()
    ]
    if settings.token_audience and not group_token:
        entries.append({"name": env.TOKEN_FILE, "value": f"{COORDINATOR_DIR}/{TOKEN_KEY}"})
    else:
        # The token by reference (never the literal): the user's Secret or the operator-made one.
        secret_name, secret_key = token_secret_ref(spec, settings.group_name)
        entries.append(
            {
                "name": env.TOKEN,
                "valueFrom": {"secretKeyRef": {"name": secret_name, "key": secret_key}},
            }
        )
    if _verifies_coordinator(spec, settings):
        ca_dir = COORDINATOR_DIR if settings.token_audience else COORDINATOR_CA_DIR
        entries.append({"name": env.COORDINATOR_CA_FILE, "value": f"{ca_dir}/{COORDINATOR_CA_KEY}"})
    return entries


def _verifies_coordinator(spec: ConsumerGroupSpec, settings: MemberSettings) -> bool:
    return not spec.coordinator.is_kafka and settings.coordinator_url.startswith("https://")


def member_mount(
    spec: ConsumerGroupSpec, settings: MemberSettings
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(pod volume, container volumeMount) a member needs: a Kafka group's client
    configuration, or the CA bundle of an https:// coordinator (a directory mount, so the
    kubelet refreshes it when the ConfigMap changes); None for plain HTTP. Members known by
    their pod get one projected volume: the token and, for https://, the CA bundle."""
    if settings.token_audience and not spec.coordinator.is_kafka:
        return _pod_identity_mount(settings.token_audience, _verifies_coordinator(spec, settings))
    if not _verifies_coordinator(spec, settings):
        return client_config_mount(spec, settings.group_name)
    volume = {
        "name": COORDINATOR_CA_VOLUME,
        "configMap": {
            "name": COORDINATOR_CA_CONFIGMAP,
            "items": [{"key": COORDINATOR_CA_KEY, "path": COORDINATOR_CA_KEY}],
        },
    }
    mount = {"name": COORDINATOR_CA_VOLUME, "mountPath": COORDINATOR_CA_DIR, "readOnly": True}
    return volume, mount


def _pod_identity_mount(audience: str, with_ca: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    sources: list[dict[str, Any]] = [
        {
            "serviceAccountToken": {
                "audience": audience,
                "expirationSeconds": TOKEN_EXPIRATION_SECONDS,
                "path": TOKEN_KEY,
            }
        }
    ]
    if with_ca:
        items = [{"key": COORDINATOR_CA_KEY, "path": COORDINATOR_CA_KEY}]
        sources.append({"configMap": {"name": COORDINATOR_CA_CONFIGMAP, "items": items}})
    volume = {"name": COORDINATOR_VOLUME, "projected": {"sources": sources}}
    mount = {"name": COORDINATOR_VOLUME, "mountPath": COORDINATOR_DIR, "readOnly": True}
    return volume, mount


def identity_annotations(
    slot: int, instance_id: str, protocol: RebalanceProtocolSetting, hash_: str, pod_key: str
) -> dict[str, str]:
    return {
        SLOT_ANNOTATION: str(slot),
        INSTANCE_ID_ANNOTATION: instance_id,
        PROTOCOL_ANNOTATION: protocol.value,
        TEMPLATE_HASH_ANNOTATION: hash_,
        POD_KEY_ANNOTATION: pod_key,
    }


def pod_name(group_name: str, slot: int) -> str:
    """Managed pods are named by slot: the API server then refuses a second live pod in one
    slot (409), which is the cross-process guard the slot table alone cannot give."""
    return f"{group_name}-{slot}"


def managed_pod(
    spec: ConsumerGroupSpec,
    settings: MemberSettings,
    *,
    namespace: str,
    owner_uid: str,
    slot: int,
    protocol: RebalanceProtocolSetting,
    pod_key: str,
) -> dict[str, Any]:
    """The pod manifest of a managed member in `slot`."""
    if spec.template is None:
        raise ValueError("a managed pod needs spec.template")
    instance_id = spec.instance_id(slot)
    return member_manifest(
        spec,
        settings,
        name=pod_name(settings.group_name, slot),
        namespace=namespace,
        owner_uid=owner_uid,
        labels={SLOT_LABEL: str(slot)},
        annotations=identity_annotations(
            slot, instance_id, protocol, template_hash(spec, settings.token_audience), pod_key
        ),
        entries=member_env(spec, settings, instance_id, protocol),
        env_from=client_env_from(spec),
        mount=member_mount(spec, settings),
    )


def member_selector(group_name: str) -> dict[str, Any]:
    """The label selector (metav1.LabelSelector) of a managed group's member pods: the
    group's labels and a slot label, which standby pods lack until they are promoted."""
    return {
        "matchLabels": {MANAGED_BY_LABEL: MANAGED_BY, GROUP_LABEL: group_name},
        "matchExpressions": [{"key": SLOT_LABEL, "operator": "Exists"}],
    }


def members_budget_spec(group_name: str, max_unavailable: int | str) -> dict[str, Any]:
    """The spec of the PodDisruptionBudget over a managed group's member pods."""
    return {"selector": member_selector(group_name), "maxUnavailable": max_unavailable}


def budget_key(budget_spec: Mapping[str, Any]) -> str:
    """What the operator remembers of a budget it wrote or found as wanted (group_memory)."""
    return json.dumps(budget_spec, sort_keys=True)


def format_selector(selector: Mapping[str, Any]) -> str:
    """A label selector serialized as metav1.FormatLabelSelector does (requirements sorted
    by key; `key` for Exists, `!key` for DoesNotExist): what an HPA parses back."""
    parts: list[tuple[str, str]] = [
        (key, f"{key}={value}") for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = ",".join(sorted(expression.get("values") or []))
        text = {
            "Exists": key,
            "DoesNotExist": f"!{key}",
            "In": f"{key} in ({values})",
            "NotIn": f"{key} notin ({values})",
        }[operator]
        parts.append((key, text))
    return ",".join(text for _, text in sorted(parts))


def member_manifest(
    spec: ConsumerGroupSpec,
    settings: MemberSettings,
    *,
    name: str,
    namespace: str,
    owner_uid: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    entries: list[dict[str, Any]],
    env_from: list[dict[str, Any]] | None = None,
    mount: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A pod of the group made from `spec.template` (a slot's member or a standby): the
    template's labels and annotations with `labels`/`annotations` and the group's own over
    them, the ConsumerGroup as controlling owner, and the member env `entries` set."""
    if spec.template is None:
        raise ValueError("a member pod needs spec.template")
    template = spec.template.model_dump(mode="json", by_alias=True, exclude_none=True)
    metadata = template.get("metadata") or {}
    owner = group_owner(settings.group_name, owner_uid)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                **(metadata.get("labels") or {}),
                GROUP_LABEL: settings.group_name,
                **labels,
                MANAGED_BY_LABEL: MANAGED_BY,
            },
            "annotations": {**(metadata.get("annotations") or {}), **annotations},
            "ownerReferences": [owner],
        },
        "spec": with_member_env(
            template["spec"], entries, env_from, mount, settings.member_health_port
        ),
    }


def with_member_env(
    pod_spec: Mapping[str, Any],
    entries: list[dict[str, Any]],
    env_from: list[dict[str, Any]] | None = None,
    mount: tuple[dict[str, Any], dict[str, Any]] | None = None,
    health_port: int | None = None,
) -> dict[str, Any]:
    """A copy of `pod_spec` whose every container carries `entries` (replacing same names)
    and `env_from` (the Kafka client Secret, appended once), and, with `mount`, the client
    configuration Secret's volume mounted read-only in every container. A container that
    runs `member run` also gets httpGet probes on its health endpoints (member_probes; on
    `health_port` where the template sets no port)."""
    result = copy.deepcopy(dict(pod_spec))
    if "containers" in result:
        result["containers"] = [
            with_health_probes(c, health_port) for c in result["containers"] or []
        ]
    owned = MEMBER_ENV_NAMES | {str(e["name"]) for e in entries}
    close = close_timeout_entry(result.get("terminationGracePeriodSeconds"))
    for container in result.get("containers") or []:
        kept = [e for e in container.get("env") or [] if e.get("name") not in owned]
        container["env"] = kept + copy.deepcopy(entries)
        if close is not None and all(e.get("name") != env.CLOSE_TIMEOUT_MS for e in kept):
            container["env"].append(dict(close))
        if env_from:
            sources = [s for s in container.get("envFrom") or [] if s not in env_from]
            container["envFrom"] = sources + copy.deepcopy(env_from)
        if mount is not None:
            mounts = container.get("volumeMounts") or []
            kept_mounts = [m for m in mounts if m.get("name") != mount[1]["name"]]
            container["volumeMounts"] = [*kept_mounts, copy.deepcopy(mount[1])]
    if mount is not None:
        volumes = [v for v in result.get("volumes") or [] if v.get("name") != mount[0]["name"]]
        result["volumes"] = [*volumes, copy.deepcopy(mount[0])]
    return result


def close_timeout_entry(grace_seconds: object) -> dict[str, str] | None:
    """The member's close timeout for a pod with this terminationGracePeriodSeconds (unset:
    Kubernetes' 30): the grace period less a fifth (at most 5 s) for the process to exit and
    its last lines to be written, so the member gives its partitions up of itself, not at
    the kubelet's SIGKILL. None for a grace of 0 (the kill comes at once)."""
    grace_ms = 1000 * (grace_seconds if isinstance(grace_seconds, int) else DEFAULT_GRACE_SECONDS)
    if grace_ms <= 0:
        return None
    return {"name": env.CLOSE_TIMEOUT_MS, "value": str(grace_ms - min(5_000, grace_ms // 5))}


def is_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    conditions = status.get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def is_deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_finished(pod: Mapping[str, Any]) -> bool:
    """Phase Succeeded or Failed: terminal in Kubernetes (every container has stopped and
    none is restarted), so no process of the pod holds its member identity any more."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_slot(pod: Mapping[str, Any]) -> int | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(SLOT_ANNOTATION)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def member_pod(pod: Mapping[str, Any]) -> MemberPod | None:
    """The orchestrator's view of a pod; None for a pod without identity annotations."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    slot = pod_slot(pod)
    instance_id = annotations.get(INSTANCE_ID_ANNOTATION)
    if slot is None or not instance_id:
        return None
    try:
        protocol = RebalanceProtocolSetting(annotations.get(PROTOCOL_ANNOTATION, ""))
    except ValueError:
        return None
    return MemberPod(
        slot=slot,
        instance_id=instance_id,
        pod_name=str(metadata.get("name", "")),
        protocol=protocol,
        template_hash=annotations.get(TEMPLATE_HASH_ANNOTATION, ""),
        ready=is_ready(pod),
        deleting=is_deleting(pod),
        pod_uid=annotations.get(POD_KEY_ANNOTATION) or str(metadata.get("uid", "")),
        finished=is_finished(pod),
    )


def members_of(pods: Iterable[Mapping[str, Any]]) -> list[MemberPod]:
    """The orchestrator's view of the pods that carry a member identity."""
    return [member for member in (member_pod(pod) for pod in pods) if member is not None]
