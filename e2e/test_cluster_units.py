"""The local bootstrap's choices that need no cluster: the operator's ports and the node's
PersistentVolume."""

from __future__ import annotations

from pathlib import Path

from e2e.cluster import LocalCluster, node_volume

FIXED_PORTS = {"9092", "8080", "9443"}


def test_the_operator_gets_free_ports_never_the_fixed_ones(tmp_path: Path) -> None:
    # A coordinator a user runs by hand holds 9092: the session's operator must not need it.
    cluster = LocalCluster(tmp_path / "kubeconfig", tmp_path / "node")
    values = dict(value.split("=", 1) for value in cluster.chart_values() if "=" in value)
    ports = {values["coordinator.port"], values["webhook.port"], values["health.port"]}
    assert len(ports) == 3 and not ports & FIXED_PORTS
    assert values["coordinator.advertisedUrl"] == f"http://127.0.0.1:{values['coordinator.port']}"
    assert cluster.coordinator_base_url() == values["coordinator.advertisedUrl"]


def test_the_node_volume_fits_the_charts_default_claim(tmp_path: Path) -> None:
    volume = node_volume(tmp_path)
    assert volume["spec"]["storageClassName"] == ""  # binds a claim that names no class
    assert "ReadWriteOnce" in volume["spec"]["accessModes"]
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
