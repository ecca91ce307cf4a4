"""Members known by their pod, the operator's side: the pod spec (a projected token volume
for the coordinator's audience instead of the group's token Secret), and the bindings table
the embedded coordinator reads from the operator's pod informer."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.server.pod_identity import Binding
from staticfleet_operator.crd import parse_spec
from staticfleet_operator.hot_standby import standby_pod
from staticfleet_operator.informer import MEMBER_PODS, Informer
from staticfleet_operator.members import (
    COORDINATOR_CA_CONFIGMAP,
    TOKEN_EXPIRATION_SECONDS,
    MemberSettings,
    managed_pod,
)
from staticfleet_operator.pod_bindings import PodBindings, pod_binding
from tests.operator.kube_harness import managed_spec
from tests.operator.test_crd import MANAGED

AUDIENCE = "staticfleet-coordinator"


def pod(url: str, audience: str | None, slot: int = 0) -> dict[str, Any]:
    manifest = managed_pod(
        parse_spec(MANAGED),
        MemberSettings(url, "orders", token_audience=audience),
        namespace="team",
        owner_uid="uid-1",
        slot=slot,
        protocol=RebalanceProtocolSetting.EAGER,
        pod_key="k",
    )
    manifest["metadata"]["uid"] = f"pod-uid-{slot}"  # what the API server adds
    return manifest


def test_a_member_pod_mounts_its_projected_token_instead_of_the_group_secret() -> None:
    spec = pod("http://coordinator:9092", AUDIENCE)["spec"]
    [volume] = spec["volumes"]
    [source] = volume["projected"]["sources"]
    assert source["serviceAccountToken"] == {
        "audience": AUDIENCE,
        "expirationSeconds": TOKEN_EXPIRATION_SECONDS,
        "path": "token",
    }
    for container in spec["containers"]:
        [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        values = {e["name"]: e for e in container["env"]}
        assert values[env.TOKEN_FILE]["value"] == f"{mount['mountPath']}/token"
        assert env.TOKEN not in values  # no group Secret reference


def test_https_puts_the_ca_bundle_in_the_same_projected_volume() -> None:
    spec = pod("https://coordinator:9092", AUDIENCE)["spec"]
    [volume] = spec["volumes"]
    kinds = [next(iter(source)) for source in volume["projected"]["sources"]]
    assert kinds == ["serviceAccountToken", "configMap"]
    assert volume["projected"]["sources"][1]["configMap"]["name"] == COORDINATOR_CA_CONFIGMAP
    values = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    mount_path = spec["containers"][0]["volumeMounts"][0]["mountPath"]
    assert values[env.COORDINATOR_CA_FILE] == f"{mount_path}/ca.crt"


def test_without_an_audience_the_pod_keeps_the_group_token_secret() -> None:
    spec = pod("http://coordinator:9092", None)["spec"]
    assert "volumes" not in spec
    values = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert "secretKeyRef" in values[env.TOKEN]["valueFrom"]
    assert env.TOKEN_FILE not in values


def test_a_pod_binds_to_the_group_id_and_instance_id_the_operator_stamped() -> None:
    manifest = pod("http://coordinator:9092", AUDIENCE, slot=2)
    group_id = parse_spec(MANAGED).group_id
    instance_id = parse_spec(MANAGED).instance_id(2)
    assert pod_binding(manifest) == Binding(group_id, instance_id, "pod-uid-2")
    del manifest["metadata"]["annotations"]["staticfleet.dev/instance-id"]
    assert pod_binding(manifest) is None  # a standby, say: no instance id to hold


def test_the_bindings_table_is_a_live_view_of_the_informer() -> None:
    informer: Informer | None = None
    bindings = PodBindings(lambda: informer)
    assert bindings.get(("team", "orders-0")) is None  # before Kopf starts the informer
    informer = Informer(lambda: pytest.fail("no API calls"), MEMBER_PODS)
    informer.apply("ADDED", pod("http://c:9092", AUDIENCE, slot=0))
    assert bindings[("team", "orders-0")].pod_uid == "pod-uid-0"
    assert list(bindings) == [("team", "orders-0")] and len(bindings) == 1
    informer.apply("DELETED", pod("http://c:9092", AUDIENCE, slot=0))
    assert ("team", "orders-0") not in bindings


def test_the_bindings_are_ready_once_the_informer_has_listed() -> None:
    informer: Informer | None = None
    bindings = PodBindings(lambda: informer)
    assert not bindings.ready()  # Kopf has not started the informer yet
    informer = Informer(lambda: pytest.fail("no API calls"), MEMBER_PODS)
    assert not bindings.ready()
    informer.synced.set()
    assert bindings.ready()


def test_a_standby_pod_presents_the_group_token_not_its_pod_token() -> None:
    """A standby's pod holds no instance id until promoted, so the coordinator can bind its
    pod token to no member ("holds no instance id of any group": 403); it gets the group
    token, which `tokens.needs_group_token` makes for a group with standbys."""
    spec = parse_spec(managed_spec(replicas=3, standbys=1))
    manifest = standby_pod(
        spec,
        MemberSettings("http://coordinator:9092", "orders", token_audience=AUDIENCE),
        namespace="team",
        owner_uid="uid-1",
        name="orders-standby-0",
        protocol=RebalanceProtocolSetting.EAGER,
        pod_key="k",
    )
    manifest["metadata"]["uid"] = "standby-uid"
    values = {e["name"]: e for e in manifest["spec"]["containers"][0]["env"]}
    assert values[env.TOKEN]["valueFrom"]["secretKeyRef"]["name"] == "orders-member-token"
    assert env.TOKEN_FILE not in values
    assert pod_binding(manifest) is None  # why the pod token could not serve it
