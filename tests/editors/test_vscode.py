"""The VS Code extension in real VS Code (code-server 4.100.3 in headless Chromium) against
`specfill serve` with the real default models: the ghost text streams in and grows, stays
steady while its first characters are typed, Tab inserts exactly the rest, and the status
bar shows the completion's statistics."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .support import BLOCK_TYPED, INSTALL_HINT, STATEMENT_TYPED, ROOT, SOURCE, missing, publish_screenshot, require_executable

pytestmark = pytest.mark.editors

TOOLS = ROOT / "editors" / ".tools" / "node_modules"
CODE_SERVER = TOOLS / ".bin" / "code-server"
VSIX = ROOT / "editors" / "vscode" / "dist" / "specfill.vsix"
DRIVER = Path(__file__).with_name("vscode_driver.cjs")
CHROMIUM = Path("/usr/bin/chromium")
TYPED = BLOCK_TYPED
TYPE_THROUGH = 3  # characters of the suggestion typed before Tab
# The status bar after a completion: its statistics, or ready where it took no model call.
GENERATED_STATUS = r"\d+% accepted · [\d.]+ tok/s"
READY_STATUS = r"ready · (precomputed|from the last suggestion)"


def user_settings(specfill: Path) -> dict[str, object]:
    return {
        "specfill.server.command": str(specfill),
        # Only the inline suggestion: the suggest widget would take Tab for itself.
        "editor.quickSuggestions": {"other": "off", "comments": "off", "strings": "off"},
        "editor.suggestOnTriggerCharacters": False,
        "editor.wordBasedSuggestions": "off",
        "editor.inlineSuggest.enabled": True,
        "editor.minimap.enabled": False,
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": False,
        "workbench.secondarySideBar.defaultVisibility": "hidden",
        "chat.commandCenter.enabled": False,
        "security.workspace.trust.enabled": False,
        "telemetry.telemetryLevel": "off",
        "update.mode": "none",
        "extensions.autoCheckUpdates": False,
        "extensions.autoUpdate": False,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_http(url: str, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"code-server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"code-server did not answer {url} within {timeout:.0f} s")


@dataclass
class CodeServer:
    url: str
    workspace: Path
    log: Path


@pytest.fixture
def code_server(specfill_exe: Path, default_models: Path, tmp_path: Path, artifacts: Path) -> Iterator[CodeServer]:
    require_executable("node", "install Node.js 20")
    if not CODE_SERVER.exists() or not (TOOLS / "playwright-core").is_dir():
        missing(f"code-server or playwright-core missing in {TOOLS}: {INSTALL_HINT}")
    if not CHROMIUM.is_file():
        missing(f"{CHROMIUM} not found: {INSTALL_HINT}")
    if not VSIX.is_file():
        missing(f"{VSIX} not found: run make editors")

    user_data, extensions, workspace = (tmp_path / name for name in ("user-data", "extensions", "workspace"))
    (user_data / "User").mkdir(parents=True)
    (user_data / "User" / "settings.json").write_text(json.dumps(user_settings(specfill_exe), indent=2))
    workspace.mkdir()
    (workspace / "primes.py").write_text(SOURCE)
    dirs = ["--user-data-dir", str(user_data), "--extensions-dir", str(extensions)]
    subprocess.run([str(CODE_SERVER), "--install-extension", str(VSIX), *dirs], check=True, capture_output=True, timeout=180)

    port = free_port()
    log = artifacts / "code-server.log"
    with log.open("wb") as out:
        # Its own session, so teardown can stop it together with the extension host and server.
        proc = subprocess.Popen(
            [
                str(CODE_SERVER), "--bind-addr", f"127.0.0.1:{port}", "--auth", "none",
                "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust",
                "--disable-getting-started-override", *dirs, str(workspace),
            ],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/healthz", 60, proc, log)
        yield CodeServer(f"http://127.0.0.1:{port}/?folder={workspace}", workspace, log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_driver(server: CodeServer, artifacts: Path, typed: str = TYPED, type_through: int = TYPE_THROUGH,
               next_suggestion: bool = False) -> dict[str, object]:
    options = {"url": server.url, "file": "primes.py", "typed": typed, "typeThrough": type_through,
               "next": next_suggestion, "nextTimeoutMs": 120_000,
               "screenshots": str(artifacts), "timeoutMs": 400_000}
    env = {**os.environ, "NODE_PATH": str(TOOLS)}
    done = subprocess.run(
        ["node", str(DRIVER), json.dumps(options)], env=env, capture_output=True, text=True, timeout=560
    )
    (artifacts / "vscode-driver.log").write_text(done.stderr)
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"error": f"driver exited with {done.returncode}"}
    result["driver_log"] = done.stderr[-3000:]
    (artifacts / "vscode-result.json").write_text(json.dumps(result, indent=2))
    assert "error" not in result, f"{result['error']}\n{done.stderr[-3000:]}\ncode-server log: {server.log}"
    return result


def test_ghost_text_streams_in_stays_steady_while_typed_through_and_tab_inserts_the_rest(
        code_server: CodeServer, artifacts: Path) -> None:
    result = run_driver(code_server, artifacts)
    seen: list[str] = result["seen"]  # type: ignore[assignment]
    accepted: str = result["accepted"]  # type: ignore[assignment]
    through: list[dict] = result["typedThrough"]  # type: ignore[assignment]

    # Typing the suggestion's first characters: on every frame after each key the ghost text
    # is the rest of the same suggestion (never blank, never the old text).
    assert len(through) == TYPE_THROUGH, through
    shown = seen[-1]
    for step in through:
        assert shown.startswith(step["typed"]), (shown, step)
        assert step["frames"] == [shown[len(step["typed"]):]], (step, result["driver_log"])
    typed_through = through[-1]["typed"]
    assert accepted == shown[len(typed_through):]

    assert len(seen) >= 2, f"ghost text never changed while streaming: {seen!r}"
    assert len(seen[-1]) > len(seen[0]), f"ghost text did not grow: {seen!r}"
    assert "\n" in accepted, f"a block completion shows more than one line: {accepted!r}"
    assert accepted.strip(), "no ghost text to accept"
    # The tab's dirty mark can clear a moment before code-server's write reaches the disk,
    # and the file can still hold what it held before the typing (seen once, 2026-12-03).
    path, deadline = code_server.workspace / "primes.py", time.monotonic() + 15
    saved = path.read_text()
    while saved in (SOURCE, SOURCE + TYPED) and time.monotonic() < deadline:
        time.sleep(0.2)
        saved = path.read_text()
    assert saved.startswith(SOURCE + TYPED + typed_through)
    inserted = saved[len(SOURCE + TYPED + typed_through):]
    # Exactly the suggestion on screen; VS Code draws no trailing empty lines, so a
    # suggestion ending in line breaks inserts them after what the screen showed.
    assert inserted.startswith(accepted) and inserted[len(accepted):].strip("\n") == "", (
        inserted, accepted, result["driver_log"])
    assert re.search(GENERATED_STATUS, str(result["status"])), result["status"]
    publish_screenshot(artifacts / "vscode-ghost-text.png", "vscode-ghost-text.png")


def test_after_tab_the_next_suggestion_comes_by_itself_and_the_status_says_where_from(
        code_server: CodeServer, artifacts: Path) -> None:
    # A statement, not the block: accepting the whole body ends the file's only function at
    # the end of the file, where the right next suggestion is nothing.
    result = run_driver(code_server, artifacts, typed=STATEMENT_TYPED, type_through=0, next_suggestion=True)
    after = result["next"]
    assert after["ghost"].strip(), (after, result["driver_log"])  # type: ignore[index]
    # Ready with no model call (precomputed, or the accepted suggestion's own generation
    # went past it), or generated: which one depends on the models, not on the client.
    assert re.search(f"{READY_STATUS}|{GENERATED_STATUS}", str(after["status"])), after  # type: ignore[index]
