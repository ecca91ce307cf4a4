"""What a process imports at start: a member imports its client, not the coordinator's server,
the Kafka protocol or the operator (each start of each member pod pays for what it imports:
`python -m bench.process_start`), and the packages' public names still resolve when asked.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return set(json.loads(proc.stdout.splitlines()[-1]))


def packages(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules} | modules


NOT_FOR_A_MEMBER = [
    "kafka",  # kafka-python: only for a kafka:// coordinator, source or --kafka-config
    "coordinator.server",
    "coordinator.coordinator",
    "coordinator.store",
    "kopf",
    "pyspark",
    "prometheus_client",
]


def test_a_member_on_our_coordinator_imports_its_client_and_nothing_it_does_not_run() -> None:
    loaded = packages(
        modules_after(
            "from staticfleet.cli import build_parser\n"
            "build_parser(['member', 'run', '--group-id', 'g'])\n"
            "import staticfleet.member.runtime"
        )
    )
    assert "coordinator.client.http" in loaded and "aiohttp" in loaded
    assert sorted(loaded & set(NOT_FOR_A_MEMBER)) == []


def test_a_member_on_kafka_imports_the_kafka_protocol_when_it_opens_the_transport() -> None:
    loaded = modules_after(
        "from staticfleet.member.runtime import open_transport\n"
        "open_transport('kafka://127.0.0.1:9', None, 'c')"
    )
    assert "coordinator.client.kafka_transport" in loaded and "kafka.protocol" in loaded


def test_the_operator_runs_without_kubernetes_asyncio() -> None:
    """Every operator module imports with kubernetes_asyncio hidden, as `operator run` hides
    it (Kopf would import its every model class); one of ours importing it would fail."""
    loaded = modules_after(
        "import pkgutil, importlib\n"
        "from staticfleet.commands.operator_cmd import hide_kubernetes_asyncio\n"
        "hide_kubernetes_asyncio()\n"
        "import staticfleet_operator\n"
        "for m in pkgutil.iter_modules(staticfleet_operator.__path__):\n"
        "    importlib.import_module('staticfleet_operator.' + m.name)"
    )
    assert {"kopf", "staticfleet_operator.app", "staticfleet_operator.kube"} <= loaded
    assert sorted(m for m in loaded if m.startswith("kubernetes_asyncio.")) == []


def test_the_parser_without_a_command_still_lists_every_command() -> None:
    from staticfleet.cli import SUBCOMMAND_MODULES, build_parser

    usage = build_parser().format_usage()
    assert all(name in usage for name, _module in SUBCOMMAND_MODULES)
    assert "{member}" in build_parser(["member", "run"]).format_usage()


PACKAGES = ["coordinator", "coordinator.client"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_of_a_package_is_its_modules_object(package: str) -> None:
    module = importlib.import_module(package)
    exports: dict[str, tuple[str, ...]] = module._EXPORTS
    assert module.__all__ == sorted(name for names in exports.values() for name in names)
    for source, names in exports.items():
        for name in names:
            assert getattr(module, name) is getattr(importlib.import_module(source), name)
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        _ = module.NoSuchName


@pytest.mark.parametrize("package", PACKAGES)
def test_the_names_mypy_reads_are_the_names_imported_at_run_time(package: str) -> None:
    """The `if TYPE_CHECKING:` imports and `_EXPORTS` list the same names from the same
    modules: a name only mypy knew would type-check and then fail when used."""
    path = REPO_ROOT / package.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text())
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    typed: dict[str, tuple[str, ...]] = {}
    for node in guarded.body:
        assert isinstance(node, ast.ImportFrom) and node.module is not None
        typed[node.module] = tuple(alias.name for alias in node.names)
    assert typed == importlib.import_module(package)._EXPORTS


def test_a_submodule_imported_from_the_package_still_loads() -> None:
    loaded = modules_after("from coordinator import journal_metrics, expected_members")
    assert {"coordinator.journal_metrics", "coordinator.expected_members"} <= loaded
    assert "coordinator.coordinator" not in loaded
