"""Member pods of an https:// coordinator mount its CA bundle and are told where it is."""

from __future__ import annotations

from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.crd import parse_spec
from staticfleet_operator.members import (
    COORDINATOR_CA_CONFIGMAP,
    MemberSettings,
    managed_pod,
    with_member_env,
)
from tests.operator.test_crd import MANAGED, with_changes


def pod(url: str, spec_data: dict[str, object] = MANAGED) -> dict[str, object]:
    return managed_pod(
        parse_spec(spec_data),
        MemberSettings(url, "orders"),
        namespace="team",
        owner_uid="uid-1",
        slot=0,
        protocol=RebalanceProtocolSetting.EAGER,
        pod_key="k",
    )


def test_an_https_coordinator_mounts_the_ca_configmap_and_points_the_member_at_it():
    spec = pod("https://staticfleet-coordinator.ops.svc:9092")["spec"]
    assert isinstance(spec, dict)
    [volume] = spec["volumes"]
    assert volume["configMap"]["name"] == COORDINATOR_CA_CONFIGMAP
    for container in spec["containers"]:
        [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mount["readOnly"] is True
        values = {e["name"]: e.get("value") for e in container["env"]}
        assert values[env.COORDINATOR_CA_FILE] == f"{mount['mountPath']}/ca.crt"


def test_plain_http_and_kafka_groups_mount_no_coordinator_ca():
    spec = pod("http://staticfleet-coordinator.ops.svc:9092")["spec"]
    assert isinstance(spec, dict)
    assert "volumes" not in spec
    assert all(
        env.COORDINATOR_CA_FILE not in {e["name"] for e in c["env"]} for c in spec["containers"]
    )
    kafka = with_changes(
        MANAGED,
        topics=[{"name": "orders"}],
        coordinator={"type": "kafka", "bootstrapServers": "k:9093"},
    )
    spec = pod("https://unused", kafka)["spec"]
    assert isinstance(spec, dict)
    assert "volumes" not in spec


def test_a_template_cannot_point_the_member_at_another_ca():
    # The operator owns the variable: a template's own value is replaced (or dropped).
    template = {
        "containers": [{"name": "m", "env": [{"name": env.COORDINATOR_CA_FILE, "value": "/x"}]}]
    }
    result = with_member_env(template, [])
    names = [entry["name"] for entry in result["containers"][0]["env"]]
    assert env.COORDINATOR_CA_FILE not in names


def test_operator_run_serves_its_coordinator_over_tls_from_files(tmp_path, capsys):
    from staticfleet.cli import build_parser, main
    from staticfleet.commands.operator_cmd import options_from_args
    from staticfleet.kafka.pki import CertificateAuthority, name

    ca = CertificateAuthority.create(tmp_path, "ca", "coordinator-ca")
    pair = ca.issue(tmp_path, "tls", name("coordinator"), server=True)
    args = build_parser().parse_args(
        [
            "operator",
            "run",
            "--coordinator-tls-cert-file",
            str(pair.cert),
            "--coordinator-tls-key-file",
            str(pair.key),
        ]
    )
    options = options_from_args(args)
    assert options.coordinator_tls.cert_file == pair.cert
    assert options_from_args(build_parser().parse_args(["operator", "run"])).coordinator_tls is None
    # A key that is not the certificate's: refused at start, naming the files.
    other = ca.issue(tmp_path, "other", name("other"), server=True)
    argv = ["operator", "run", "--coordinator-tls-cert-file", str(pair.cert)]
    assert main([*argv, "--coordinator-tls-key-file", str(other.key)]) == 2
    assert "tls.crt" in capsys.readouterr().err
    assert main(argv) == 2
    assert "go together" in capsys.readouterr().err
