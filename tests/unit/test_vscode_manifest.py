"""The VS Code extension's manifest: a workspace that is not trusted must not choose the
program the extension runs or the model files the server loads."""

from __future__ import annotations

import json
from pathlib import Path

MANIFEST = Path(__file__).resolve().parents[2] / "editors" / "vscode" / "package.json"


def test_untrusted_workspaces_are_limited_and_the_dangerous_settings_restricted():
    manifest = json.loads(MANIFEST.read_text())
    untrusted = manifest["capabilities"]["untrustedWorkspaces"]
    assert untrusted["supported"] == "limited"
    settings = set(manifest["contributes"]["configuration"]["properties"])
    restricted = set(untrusted["restrictedConfigurations"])
    assert restricted <= settings  # no typo: each names a real setting
    choose_files = {s for s in settings if s.startswith("specfill.server.")
                    or s in ("specfill.model.target", "specfill.model.draft")}
    assert choose_files and choose_files <= restricted


def test_every_server_setting_is_a_vscode_setting_that_the_extension_sends():
    from dataclasses import fields, is_dataclass

    from lsp_server.config import Config

    def leaves(obj, prefix=""):
        for f in fields(obj):
            value = getattr(obj, f.name)
            yield from leaves(value, f"{prefix}{f.name}.") if is_dataclass(value) else [f"{prefix}{f.name}"]

    manifest = json.loads(MANIFEST.read_text())
    settings = set(manifest["contributes"]["configuration"]["properties"])
    sent = (MANIFEST.parent / "src" / "settings.ts").read_text()
    for path in leaves(Config()):
        if path == "enabled":  # the extension's own specfill.enable switches it on and off
            continue
        assert f"specfill.{path}" in settings, path
        assert f"'{path}'," in sent, path


def test_an_untrusted_workspace_cannot_choose_where_code_is_sent():
    manifest = json.loads(MANIFEST.read_text())
    restricted = set(manifest["capabilities"]["untrustedWorkspaces"]["restrictedConfigurations"])
    settings = set(manifest["contributes"]["configuration"]["properties"])
    assert {s for s in settings if s.startswith("specfill.backend.")} <= restricted
    assert "specfill.model.cacheDir" in restricted
