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
