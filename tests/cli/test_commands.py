"""The `staticfleet` command as a new user meets it: `--version`, the base install without
extras, and `make help`.

The base install is simulated in a subprocess whose import system cannot find the packages
the extras bring (kopf, PyYAML, PySpark, matplotlib), as on `pip install staticfleet`.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from staticfleet.cli import EXTRA_OF_MODULE

ROOT = Path(__file__).resolve().parents[2]

# Runs `staticfleet <argv>` with every package an extra installs made unimportable.
BASE_INSTALL = """
import importlib.abc, sys
BLOCKED = {blocked!r}

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from staticfleet.cli import main
sys.exit(main(sys.argv[1:]))
"""


def staticfleet_base(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    code = BASE_INSTALL.format(blocked=sorted(EXTRA_OF_MODULE))
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_version_is_the_installed_package_version() -> None:
    proc = subprocess.run(
        [Path(sys.executable).parent / "staticfleet", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"staticfleet {version('staticfleet')}"


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["--help"],
        ["coordinator", "serve", "--help"],
        ["coordinator", "openapi"],
        ["member", "run", "--help"],
        ["operator", "run", "--help"],
        ["spark", "generate", "--help"],
    ],
    ids=" ".join,
)
def test_commands_that_need_no_extra_work_on_the_base_install(argv: list[str]) -> None:
    proc = staticfleet_base(*argv)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["operator", "run"], "operator"),
        (["crds", "--check"], "operator"),
        (["demo", "--output-dir", "/nonexistent/never-written"], "demo"),
        (["spark", "analytics", "--journal", "/nope", "--output", "/nope/out"], "spark"),
    ],
    ids=lambda value: value if isinstance(value, str) else " ".join(value),
)
def test_a_command_whose_extra_is_missing_names_it_in_one_line(argv: list[str], extra: str) -> None:
    proc = staticfleet_base(*argv, timeout=30)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"`{extra}` extra" in lines[0] and f"pip install 'staticfleet[{extra}]'" in lines[0]


def test_every_module_named_for_an_extra_is_installed_by_that_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    # import name -> distribution name, where they differ
    distribution = {"yaml": "pyyaml", "confluent_kafka": "confluent-kafka"}
    for module, extra in EXTRA_OF_MODULE.items():
        names = [re.split(r"[<>=\[ ]", req)[0].lower() for req in extras[extra]]
        assert distribution.get(module, module) in names, (module, extra)


def test_make_help_lists_every_target_with_one_line() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, flags=re.MULTILINE))
    proc = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    described = {}
    for line in proc.stdout.splitlines():
        name, _, text = line.partition(" ")
        described[name] = text.strip()
    assert set(described) == targets
    assert all(described.values()), described


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_make_install_prints_no_build_warning(tmp_path: Path) -> None:
    # The real `make install` recipe into a fresh venv (the base package only, to keep it
    # short): setuptools builds the project in an isolated environment, and deprecated
    # metadata shows up there as BuildBackendWarning blocks.
    venv = tmp_path / "venv"
    proc = subprocess.run(
        ["make", "--no-print-directory", "install", f"VENV={venv}", "EXTRAS="],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    output = proc.stdout + proc.stderr
    assert "Warning" not in output and "deprecated" not in output, output

    # The base install, for real: the commands that need no extra work, the others say which.
    def staticfleet_in_venv(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [str(venv / "bin" / "staticfleet"), *argv]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    installed = staticfleet_in_venv("--version")
    assert installed.stdout.strip() == f"staticfleet {version('staticfleet')}", installed.stderr
    assert staticfleet_in_venv("coordinator", "serve", "--help").returncode == 0
    assert staticfleet_in_venv("member", "run", "--help").returncode == 0
    refused = staticfleet_in_venv("operator", "run")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "staticfleet: this command needs the `operator` extra (no module named 'kopf'): "
        "pip install 'staticfleet[operator]'"
    ]


def test_the_default_coordinator_store_is_ignored_by_git() -> None:
    # `coordinator serve` run from the repository root leaves its SQLite file (and WAL) there.
    from staticfleet.commands.coordinator_cmd import DEFAULT_STORE

    filename = DEFAULT_STORE.removeprefix("sqlite://")
    assert "/" not in filename  # relative: it lands in the working directory
    names = [filename, f"{filename}-wal", f"{filename}-shm", f"pipeline/{filename}"]
    proc = subprocess.run(
        ["git", "check-ignore", "--no-index", *names], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.stdout.split() == names, proc.stderr
