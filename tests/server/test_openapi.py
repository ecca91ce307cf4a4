"""The OpenAPI document: checked in, current, served, and covering every route."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from coordinator.server import build_openapi, render_openapi
from coordinator.server.routes import OPERATIONS
from staticfleet.commands import coordinator_cmd

from .conftest import Server

CHECKED_IN = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
REGENERATE = "staticfleet coordinator openapi --output docs/openapi.json"


def test_checked_in_document_is_current() -> None:
    assert CHECKED_IN.read_text(encoding="utf-8") == render_openapi(), (
        f"docs/openapi.json is stale; regenerate it with `{REGENERATE}`"
    )


def test_every_operation_is_documented() -> None:
    document = build_openapi()
    documented = {
        (method.upper(), path) for path, item in document["paths"].items() for method in item
    }
    assert documented == {(op.method, op.path) for op in OPERATIONS}
    # Every $ref resolves.
    text = json.dumps(document)
    for name in {part.split('"')[0] for part in text.split("#/components/schemas/")[1:]}:
        assert name in document["components"]["schemas"], name


def test_bytes_are_base64_strings() -> None:
    schemas = build_openapi()["components"]["schemas"]
    metadata = schemas["JoinGroupProtocol"]["properties"]["metadata"]
    assert metadata["type"] == "string" and metadata["format"] == "byte"


def _run_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="staticfleet")
    coordinator_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.handler(args)
    return result


def test_openapi_command_prints_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert _run_command(["coordinator", "openapi"]) == 0
    assert capsys.readouterr().out == render_openapi()
    output = tmp_path / "openapi.json"
    assert _run_command(["coordinator", "openapi", "--output", str(output)]) == 0
    assert output.read_text(encoding="utf-8") == render_openapi()


async def test_server_serves_it(server: Server) -> None:
    reply = await server.call("GET", "/openapi.json", token=None)
    assert reply.status == 200
    assert reply.body == build_openapi()
