"""The example ConsumerGroups run members that do what their spec says.

A managed pod gets its topics from the operator (STATICFLEET_TOPICS, from `spec.topics`); a
`--topics` flag in the template would win over it, and editing `spec.topics` would then
change nothing. Here the pod the operator makes from the example is resolved as
`staticfleet member run` resolves its settings (flags first, then the environment).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from coordinator.client.config import RebalanceProtocolSetting
from staticfleet.commands import member_cmd
from staticfleet.member.settings import settings_from
from staticfleet_operator.crd import parse_spec
from staticfleet_operator.members import MemberSettings, managed_pod

ROOT = Path(__file__).resolve().parents[2]
MANAGED_EXAMPLE = ROOT / "examples" / "managed-group.yaml"


def member_topics(group: dict[str, Any]) -> tuple[str, ...]:
    """The topics the member in slot 0 of `group` subscribes to."""
    spec = parse_spec(group["spec"])
    pod = managed_pod(
        spec,
        MemberSettings("http://coordinator:9092", group["metadata"]["name"]),
        namespace="orders",
        owner_uid="uid-1",
        slot=0,
        protocol=RebalanceProtocolSetting.EAGER,
        pod_key="key-1",
    )
    (container,) = pod["spec"]["containers"]
    environ = {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
    parser = argparse.ArgumentParser()
    member_cmd.register(parser.add_subparsers())
    args = parser.parse_args(container["args"])
    return tuple(settings_from(member_cmd.overrides_from(args), environ).config.topics)


def test_the_managed_example_subscribes_to_its_spec_topics() -> None:
    group = yaml.safe_load(MANAGED_EXAMPLE.read_text())
    assert member_topics(group) == ("orders", "refunds")
    # Editing spec.topics is what changes the members' subscription.
    group["spec"]["topics"] = [{"name": "payments", "partitions": 12}]
    assert member_topics(group) == ("payments",)
