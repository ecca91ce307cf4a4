"""e2e/kube_api.py's pod watch against kmock's Kubernetes emulator (no API server): the
operator benchmark binds and watches pods through it as a node would."""

from __future__ import annotations

from typing import Any

import kmock
from kubernetes_asyncio.client import ApiClient, Configuration

from e2e.kube_api import Kube, watch_pods


def _pod(name: str) -> dict[str, Any]:
    spec = {"containers": [{"name": "c", "image": "i"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def test_the_pod_watch_relists_when_its_resource_version_expired() -> None:
    """A 410 Gone (the watch's resourceVersion expired) makes the watch list again and
    report what changed meanwhile, so the watcher's view of its pods stays complete."""
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        emulator.resources["v1/pods"] = kmock.ResourceInfo(
            kind="Pod", singular="pod", namespaced=True, verbs={"list", "watch", "create", "delete"}
        )
        expired = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
        # The library sends watch=True (kube-apiserver takes it; kmock's emulator does not
        # see a watch in it, so the test serves the watch's answer itself).
        watching = emulator[lambda r: str(r.params.get("watch", "")).lower() == "true"]
        watching[:1] << {"type": "ERROR", "object": expired}
        kube = Kube(ApiClient(Configuration(host=str(server.url).rstrip("/"))))
        pods = "/api/v1/namespaces/ns/pods"
        try:
            for name in ("a", "b"):
                await kube.client.call_api(pods, "POST", body=_pod(name), auth_settings=[])
            events = watch_pods(kube, timeout_seconds=5)
            first = [await anext(events), await anext(events)]
            assert sorted((kind, p["metadata"]["name"]) for kind, p in first) == [
                ("ADDED", "a"),
                ("ADDED", "b"),
            ]
            # Meanwhile (before the watch starts): a goes, c comes.
            await kube.client.call_api(f"{pods}/a", "DELETE", auth_settings=[])
            await kube.client.call_api(pods, "POST", body=_pod("c"), auth_settings=[])
            after = [await anext(events), await anext(events)]
            assert sorted((kind, p["metadata"]["name"]) for kind, p in after) == [
                ("ADDED", "c"),
                ("DELETED", "a"),
            ]
            await events.aclose()
        finally:
            await kube.close()
