"""What the informer keeps of a member pod (informer.pod_kept): every field the operator
reads gives the same answer from the kept pod as from the whole one, and the rest (volumes,
most of the env, container statuses) is not held, for every member pod of every group."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.crd import parse_spec
from staticfleet_operator.handlers import indexed
from staticfleet_operator.hot_standby import pod_health
from staticfleet_operator.informer import MEMBER_PODS, Informer, pod_kept
from staticfleet_operator.kube import decoded
from staticfleet_operator.members import MemberSettings, managed_pod, member_pod
from staticfleet_operator.observed import pod_identity
from staticfleet_operator.owned import GROUP_LABEL
from staticfleet_operator.pod_bindings import pod_binding
from tests.operator.test_crd import MANAGED

RUNNING = {
    "phase": "Running",
    "podIP": "10.244.0.7",
    "conditions": [
        {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-28T05:00:00Z"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-28T05:00:03Z"},
    ],
    "containerStatuses": [{"name": "member", "ready": True, "restartCount": 0, "image": "x"}],
}


def live_pod(slot: int, status: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    """A member pod as the API server lists it: the operator's manifest, and what the API
    server and the kubelet add."""
    manifest = managed_pod(
        parse_spec(MANAGED),
        MemberSettings("http://coordinator:9092", "orders", token_audience="aud"),
        namespace="team",
        owner_uid="uid-1",
        slot=slot,
        protocol=RebalanceProtocolSetting.COOPERATIVE,
        pod_key="k",
    )
    manifest["metadata"].update(
        uid=f"pod-uid-{slot}",
        resourceVersion="41",
        creationTimestamp="2026-11-28T05:00:00Z",
        managedFields=[{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
        **metadata,
    )
    manifest["spec"]["nodeName"] = "node-1"
    manifest["status"] = status
    return manifest


@pytest.mark.parametrize(
    ("status", "metadata"),
    [
        (RUNNING, {}),
        ({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}, {}),
        ({"phase": "Unknown", "reason": "NodeLost"}, {}),
        ({"phase": "Failed"}, {}),
        (RUNNING, {"deletionTimestamp": "2026-11-28T05:01:00Z"}),
    ],
)
def test_what_the_operator_reads_of_a_pod_is_kept(
    status: dict[str, Any], metadata: dict[str, Any]
) -> None:
    whole = live_pod(3, status, **metadata)
    kept = pod_kept(whole)
    assert member_pod(kept) == member_pod(whole) and member_pod(whole) is not None
    assert pod_health(kept) == pod_health(whole)
    assert pod_binding(kept) == pod_binding(whole) and pod_binding(whole) is not None
    assert pod_identity(kept) == pod_identity(whole)
    assert kept["metadata"]["labels"] == whole["metadata"]["labels"]
    assert kept["metadata"]["creationTimestamp"] == whole["metadata"]["creationTimestamp"]


def test_the_rest_of_a_pod_is_not_held() -> None:
    whole = live_pod(0, RUNNING)
    kept = pod_kept(whole)
    assert "managedFields" not in kept["metadata"]
    assert "volumes" not in kept["spec"] and "nodeName" not in kept["spec"]
    assert "containerStatuses" not in kept["status"] and "podIP" not in kept["status"]
    [container] = kept["spec"]["containers"]
    assert [e["name"] for e in container["env"]] == [env.GROUP_ID]
    # A fraction of the pod (the informer holds one per member of every group).
    assert len(json.dumps(kept)) * 3 < len(json.dumps(whole))


def test_the_informer_stores_the_kept_pod() -> None:
    informer = Informer(lambda: pytest.fail("no API calls"), MEMBER_PODS)
    informer.apply("ADDED", live_pod(1, RUNNING))
    [stored] = informer.objects.values()
    assert stored == pod_kept(live_pod(1, RUNNING))


@pytest.mark.parametrize(
    ("status", "metadata"),
    [
        (RUNNING, {}),
        ({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}, {}),
        ({"phase": "Unknown", "reason": "NodeLost"}, {}),
        (RUNNING, {"deletionTimestamp": "2026-11-28T05:01:00Z"}),
    ],
)
def test_a_pod_decoded_as_its_shape_keeps_what_the_whole_pod_gives(
    status: dict[str, Any], metadata: dict[str, Any]
) -> None:
    """The informer decodes watch events and listings straight into the kept fields' shape:
    the kept pod is the same as from the whole pod, and the rest is never built."""
    whole = live_pod(2, status, **metadata)
    event = json.dumps({"type": "MODIFIED", "object": whole}).encode()
    shaped = decoded(event, MEMBER_PODS.event_shape)
    assert shaped["type"] == "MODIFIED"
    assert pod_kept(shaped["object"]) == pod_kept(whole)
    assert "managedFields" not in shaped["object"]["metadata"]
    assert "volumes" not in shaped["object"]["spec"]
    listing = {"kind": "PodList", "metadata": {"resourceVersion": "9"}, "items": [whole, whole]}
    shaped_list = decoded(json.dumps(listing).encode(), MEMBER_PODS.listing_shape)
    assert shaped_list["metadata"] == {"resourceVersion": "9"}
    assert [pod_kept(p) for p in shaped_list["items"]] == [pod_kept(whole)] * 2


def test_an_answer_the_shape_does_not_fit_is_decoded_whole() -> None:
    """A shape only saves memory: an object it does not fit (a list where it expects an
    object, as an odd server might send) is decoded whole, not refused."""
    odd = {"type": "ADDED", "object": {"metadata": {"name": "p"}, "spec": {"containers": 7}}}
    assert decoded(json.dumps(odd).encode(), MEMBER_PODS.event_shape) == odd


def test_pods_decoded_apart_share_their_strings() -> None:
    """Each watch event is its own JSON document: kept pods share one copy of each repeated
    string (keys, label and annotation names, phases) instead of one per pod."""
    first, second = (pod_kept(json.loads(json.dumps(live_pod(slot, RUNNING)))) for slot in (1, 2))
    assert first == pod_kept(live_pod(1, RUNNING))
    [key_1] = [k for k in first["metadata"] if k == "labels"]
    [key_2] = [k for k in second["metadata"] if k == "labels"]
    assert key_1 is key_2
    assert first["status"]["phase"] is second["status"]["phase"]
    labels_1, labels_2 = first["metadata"]["labels"], second["metadata"]["labels"]
    group = GROUP_LABEL
    assert labels_1[group] == labels_2[group] == "orders"
    assert next(v for k, v in labels_1.items() if k == group) is next(
        v for k, v in labels_2.items() if k == group
    )


def test_the_consumer_group_index_keeps_shared_strings_and_no_managed_fields() -> None:
    metadata = {"name": "orders", "namespace": "team", "managedFields": [{}]}
    body = {"kind": "ConsumerGroup", "metadata": metadata, "spec": MANAGED}
    first, second = (indexed(json.loads(json.dumps(body))) for _ in range(2))
    assert first == {**body, "metadata": {"name": "orders", "namespace": "team"}}
    [spec_1] = [k for k in first if k == "spec"]
    [spec_2] = [k for k in second if k == "spec"]
    assert spec_1 is spec_2 and first["metadata"]["name"] is second["metadata"]["name"]
