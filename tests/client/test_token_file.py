"""The member's token from a file (a projected ServiceAccount token), read again when the
kubelet rotates it; the settings that choose it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coordinator.client import env
from coordinator.client.token_file import TokenFile, TokenFileError
from staticfleet.member.settings import Overrides, settings_from

BASE = Overrides(coordinator_url="http://coordinator:9092", group_id="g", topics="t")


def project(volume: Path, token: str, version: int) -> None:
    """Write `token` as the kubelet's atomic writer does: a new timestamped directory, then
    the `..data` symlink swapped to it (rename over the old link)."""
    directory = volume / f"..{version}"
    directory.mkdir()
    (directory / "token").write_text(token)
    (volume / "..data_tmp").symlink_to(directory.name)
    os.replace(volume / "..data_tmp", volume / "..data")
    if not (volume / "token").is_symlink():
        (volume / "token").symlink_to("..data/token")


def test_a_rotated_token_is_read_again_and_an_unchanged_one_is_not(tmp_path: Path) -> None:
    project(tmp_path, "first.jwt.token", 1)
    token = TokenFile(tmp_path / "token")
    assert token.current() == "first.jwt.token"
    assert token.current() == "first.jwt.token"
    assert token.reads == 1  # unchanged: one stat per request, no read
    project(tmp_path, "second.jwt.token\n", 2)
    assert token.current() == "second.jwt.token"
    assert token.reads == 2


def test_a_token_file_vanishing_keeps_the_last_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("kept.jwt.token")
    token = TokenFile(path)
    path.unlink()
    assert token.current() == "kept.jwt.token"


def test_a_missing_or_empty_token_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="cannot read token file"):
        TokenFile(tmp_path / "missing")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(TokenFileError, match="is empty"):
        TokenFile(tmp_path / "empty")


def test_settings_take_the_token_file_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("pod.jwt.token")
    settings = settings_from(BASE, {env.TOKEN_FILE: str(tmp_path / "token")})
    assert isinstance(settings.token, TokenFile)
    assert settings.token.current() == "pod.jwt.token"
    with pytest.raises(ValueError, match="not both"):
        settings_from(BASE, {env.TOKEN_FILE: str(tmp_path / "token"), env.TOKEN: "t"})
    with pytest.raises(ValueError, match="--token-file"):
        settings_from(BASE, {env.TOKEN_FILE: str(tmp_path / "missing")})
