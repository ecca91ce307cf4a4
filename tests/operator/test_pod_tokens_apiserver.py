"""Members known by their pod against a real kube-apiserver (etcd, kube-apiserver and
kube-controller-manager from e2e/build.sh, e2e/controlplane.py; no kubelet: a TokenRequest
bound to a pod object needs none). The API server issues each member pod's projected token
(TokenRequest with the coordinator's audience, bound to the pod), the operator's reviewer
(token_review.py) asks TokenReview, and the embedded coordinator server lets a pod act only
as its own instance id. Slow (the control plane starts in ~10-20 s)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import pytest

from coordinator import GroupCoordinator, SqliteStore
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.server import AuthConfig, create_app, start_server
from coordinator.server.pod_identity import PodAuth, PodIdentity, Refused, ReviewCache
from e2e.controlplane import DEFAULT_BIN_DIR, ControlPlane, running_control_plane
from staticfleet_operator.crd import parse_spec
from staticfleet_operator.kube import CORE, KubeApi, path
from staticfleet_operator.members import MemberSettings, managed_pod
from staticfleet_operator.pod_bindings import pod_binding
from staticfleet_operator.token_review import token_reviewer
from tests.operator.test_crd import MANAGED
from tests.server.conftest import TEST_CONFIG
from tests.server.messages import join_body

ROOT = Path(__file__).resolve().parents[2]
AUDIENCE = "staticfleet-coordinator"
NAMESPACE = "team"
ACCOUNT = "orders"
ADMIN = "admin-token-for-the-test"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # a clean clone builds them first


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if not all((DEFAULT_BIN_DIR / name).is_file() for name in BINARIES):
        build = subprocess.run(
            [str(ROOT / "e2e" / "build.sh")], capture_output=True, text=True, check=False
        )
        assert build.returncode == 0, build.stdout + build.stderr
    with running_control_plane(tmp_path_factory.mktemp("cp")) as cp:
        yield cp


@pytest.fixture
async def kube(control_plane: ControlPlane) -> AsyncIterator[KubeApi]:
    api = KubeApi.connect(
        kopf.ConnectionInfo(
            server=control_plane.server,
            ca_path=str(control_plane.ca_cert),
            certificate_path=str(control_plane.admin_cert),
            private_key_path=str(control_plane.admin_key),
        )
    )
    yield api
    await api.close()


async def create(kube: KubeApi, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    if kind == "namespace":
        return await kube.call("POST", path(CORE, "namespaces"), body=body)
    plural = "serviceaccounts" if kind == "serviceaccount" else "pods"
    return await kube.call("POST", path(CORE, plural, NAMESPACE), body=body)


async def pod_token(kube: KubeApi, pod: dict[str, Any], audience: str = AUDIENCE) -> str:
    """What the kubelet would project: a TokenRequest bound to the pod, for `audience`."""
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [audience],
            "expirationSeconds": 3600,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod["metadata"]["name"],
                "uid": pod["metadata"]["uid"],
            },
        },
    }
    result = await kube.call(
        "POST", path(CORE, "serviceaccounts", NAMESPACE, ACCOUNT, "token"), body=body
    )
    token: str = result["status"]["token"]
    return token


def member_manifest(slot: int) -> dict[str, Any]:
    """The operator's own member pod (token audience on), with no owner (no ConsumerGroup
    CRD here) and our ServiceAccount."""
    manifest = managed_pod(
        parse_spec(MANAGED),
        MemberSettings("http://coordinator:9092", "orders", token_audience=AUDIENCE),
        namespace=NAMESPACE,
        owner_uid="none",
        slot=slot,
        protocol=RebalanceProtocolSetting.EAGER,
        pod_key=f"key-{slot}",
    )
    del manifest["metadata"]["ownerReferences"]
    manifest["spec"]["serviceAccountName"] = ACCOUNT
    return manifest


async def test_pods_tokens_from_the_api_server_act_only_as_their_pods_instance_ids(
    kube: KubeApi, tmp_path: Path
) -> None:
    await create(kube, "namespace", {"metadata": {"name": NAMESPACE}})
    await create(kube, "serviceaccount", {"metadata": {"name": ACCOUNT}})
    pods = [await create(kube, "pod", member_manifest(slot)) for slot in (0, 1)]
    tokens = [await pod_token(kube, pod) for pod in pods]
    other_audience = await pod_token(kube, pods[0], audience="https://kubernetes.default.svc")

    # The review maps a real projected token to its pod.
    probe = ReviewCache(token_reviewer(kube), AUDIENCE, time.time)
    assert await probe.identify(tokens[0]) == PodIdentity(
        NAMESPACE, ACCOUNT, "orders-0", pods[0]["metadata"]["uid"]
    )
    refused = await probe.identify(other_audience)
    assert isinstance(refused, Refused), refused

    bindings = {
        (NAMESPACE, pod["metadata"]["name"]): binding
        for pod in pods
        if (binding := pod_binding(pod)) is not None
    }
    assert len(bindings) == 2
    cache = ReviewCache(token_reviewer(kube), AUDIENCE, time.time)
    coordinator = GroupCoordinator(config=TEST_CONFIG, store=SqliteStore(tmp_path / "c.db"))
    app = create_app(
        coordinator, AuthConfig(admin_tokens=frozenset({ADMIN})), pod_auth=PodAuth(cache, bindings)
    )
    server = await start_server(app, "127.0.0.1", 0, shutdown_timeout=2.0)
    spec = parse_spec(MANAGED)
    group, instance_0 = spec.group_id, spec.instance_id(0)
    try:
        async with aiohttp.ClientSession() as http:

            async def post(path: str, body: Any, token: str) -> tuple[int, Any]:
                async with http.post(
                    f"{server.url}/v1/groups/{group}/{path}",
                    data=json.dumps(body),
                    headers={"Authorization": f"Bearer {token}"},
                ) as response:
                    return response.status, await response.json()

            # Pod 1's token may not join as pod 0's instance id.
            status, answer = await post("join", join_body(group, instance_0), tokens[1])
            assert status == 403, answer
            assert "orders-1" in answer["message"] and repr(instance_0) in answer["message"]
            # A token for another audience (say the API server's) is refused outright.
            status, answer = await post("join", join_body(group, instance_0), other_audience)
            assert status == 401 and "audience" in answer["message"], answer
            # Pod 0's own token joins as its instance id, and heartbeats reuse the review.
            status, joined = await post("join", join_body(group, instance_0), tokens[0])
            assert status == 200 and joined["error_code"] == 0, joined
            for _ in range(10):
                heartbeat = {
                    "group_id": group,
                    "generation_id": joined["generation_id"],
                    "member_id": joined["member_id"],
                    "group_instance_id": instance_0,
                }
                status, _ = await post("heartbeat", heartbeat, tokens[0])
                assert status == 200
        # One review per token: pod 1's, the other audience's, pod 0's (for 1 join + 10 beats).
        assert cache.reviews == 3
    finally:
        await server.stop()
