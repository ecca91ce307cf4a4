"""A pod's volumes materialised as host directories (emptyDir, PVC, secret, configMap,
downwardAPI, projected), mixed into `PodWorker`."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from e2e.kube_api import RAW, JsonObject, KubeError, answer, request_token
from e2e.node_agent.errors import VolumeError
from e2e.node_agent.spec import field_ref
from staticfleet_operator.kube import NotFound

if TYPE_CHECKING:
    from e2e.node_agent.agent import NodeAgent

log = logging.getLogger("e2e.node_agent")


class PodVolumes:
    """The volume half of `PodWorker`: (re)writes the files of each volume under the pod's
    directory and records where each one lives (``_volume_dirs``)."""

    # Provided by PodWorker.
    agent: NodeAgent
    pod: JsonObject
    namespace: str
    key: str
    dir: Path
    _volume_dirs: dict[str, Path]
    _volumes_lock: asyncio.Lock

    if TYPE_CHECKING:

        def _resource_value(self, ref: Mapping[str, Any]) -> str: ...

    async def materialize_volumes(self) -> None:
        """(Re)write every volume's files; emptyDir and PVC directories keep their content."""
        async with self._volumes_lock:  # containers of one pod start concurrently
            dirs: dict[str, Path] = {}
            for volume in self.pod["spec"].get("volumes") or []:
                dirs[volume["name"]] = await self._materialize(volume)
            self._volume_dirs = dirs

    async def _materialize(self, volume: JsonObject) -> Path:
        name = str(volume["name"])
        if "persistentVolumeClaim" in volume:
            claim = str(volume["persistentVolumeClaim"]["claimName"])
            target = self.agent.workdir / "pvcs" / self.namespace / claim
            target.mkdir(parents=True, exist_ok=True)
            return target
        target = self.dir / "volumes" / name
        target.mkdir(parents=True, exist_ok=True)
        files: dict[str, bytes] = {}
        if "secret" in volume:
            files = await self._secret_files(volume["secret"])
        elif "configMap" in volume:
            files = await self._config_map_files(volume["configMap"])
        elif "downwardAPI" in volume:
            files = self._downward_files(volume["downwardAPI"])
        elif "projected" in volume:
            files = await self._projected_files(volume["projected"])
        elif "emptyDir" not in volume:
            log.info("pod %s: volume %s is an empty directory here", self.key, name)
        for rel, data in files.items():
            _write_atomic(target / rel, data)
        return target

    async def _secret_files(self, source: JsonObject) -> dict[str, bytes]:
        name = str(source.get("secretName") or source.get("name"))
        secret = await self._fetch("secret", name, bool(source.get("optional")))
        if secret is None:
            return {}
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        return _select_items(data, source.get("items"), f'secret "{name}"')

    async def _config_map_files(self, source: JsonObject) -> dict[str, bytes]:
        name = str(source["name"])
        cm = await self._fetch("configmap", name, bool(source.get("optional")))
        if cm is None:
            return {}
        data = {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
        return _select_items(data, source.get("items"), f'configmap "{name}"')

    def _downward_files(self, source: JsonObject) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        for item in source.get("items") or []:
            if "fieldRef" in item:
                value = field_ref(self.pod, item["fieldRef"]["fieldPath"], self.agent.node_ip)
            else:
                value = self._resource_value(item.get("resourceFieldRef") or {})
            files[str(item["path"])] = (value or "").encode()
        return files

    async def _projected_files(self, source: JsonObject) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        for src in source.get("sources") or []:
            if "serviceAccountToken" in src:
                sat = src["serviceAccountToken"]
                token = await self.service_account_token(sat)
                files[str(sat.get("path", "token"))] = token.encode()
            elif "secret" in src:
                files.update(await self._secret_files(src["secret"]))
            elif "configMap" in src:
                files.update(await self._config_map_files(src["configMap"]))
            elif "downwardAPI" in src:
                files.update(self._downward_files(src["downwardAPI"]))
        return files

    async def service_account_token(self, source: Mapping[str, Any]) -> str:
        sa = str(self.pod["spec"].get("serviceAccountName") or "default")
        audience = source.get("audience")
        try:
            token, _ = await request_token(
                self.agent.kube,
                self.namespace,
                sa,
                audiences=[str(audience)] if audience else None,
                expiration_seconds=int(source.get("expirationSeconds") or 3607),
                bound_pod=self.pod,
            )
        except KubeError as e:
            raise VolumeError(f"cannot get a token for serviceaccount {sa}: {e}") from e
        return token

    async def _fetch(self, kind: str, name: str, optional: bool) -> JsonObject | None:
        core = self.agent.kube.core
        read = core.read_namespaced_secret if kind == "secret" else core.read_namespaced_config_map
        try:
            return await answer(read(name, self.namespace, **RAW))
        except NotFound as e:
            if optional:
                return None
            raise VolumeError(f"{kind} {name!r} not found") from e
        except KubeError as e:
            raise VolumeError(f"cannot read {kind} {self.namespace}/{name}: {e}") from e


def _select_items(data: Mapping[str, bytes], items: Any, what: str) -> dict[str, bytes]:
    if not items:
        return dict(data)
    out: dict[str, bytes] = {}
    for item in items:
        key = str(item["key"])
        if key not in data:
            raise VolumeError(f"{what} has no key {key!r}")
        out[str(item.get("path") or key)] = data[key]
    return out


def _write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)
