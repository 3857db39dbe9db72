"""Neovim's real terminal UI (in tmux) shows the streamed ghost text; the capture becomes
docs/img/neovim-ghost-text.png. pynvim drives the same Neovim over its --listen socket."""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from .ansi_png import render
from .nvim_driver import ghost_text, nvim_argv, setup_lua, start_typing, wait_for_finished_ghost, wait_for_server, wait_until
from .support import BLOCK_TYPED, INSTALL_HINT, SOURCE, missing, publish_screenshot, require_executable

pytestmark = pytest.mark.editors

COLUMNS, ROWS = 96, 20


def test_terminal_neovim_shows_the_ghost_text_after_the_cursor(
    specfill_exe: Path, default_models: Path, tmp_path: Path, artifacts: Path
) -> None:
    try:
        import pynvim
    except ImportError:
        missing("pynvim is not installed: run make setup")
    tmux = str(require_executable("tmux", INSTALL_HINT))
    source = tmp_path / "primes.py"
    source.write_text(SOURCE)
    socket = tmp_path / "nvim.sock"
    # A private tmux server (-L) so the test never touches anyone's sessions.
    tmux_cmd = [tmux, "-L", f"specfill-test-{os.getpid()}"]
    nvim = shlex.join(nvim_argv("--listen", str(socket), "-c", "lua " + setup_lua(specfill_exe), source.name))
    env = {**os.environ, "COLORTERM": "truecolor", "TERM": "xterm-256color"}
    subprocess.run(
        [*tmux_cmd, "new-session", "-d", "-x", str(COLUMNS), "-y", str(ROWS), "-c", str(tmp_path), nvim],
        env=env,
        check=True,
        timeout=30,
    )
    try:
        wait_until(socket.exists, 30, "Neovim's socket")
        nv = pynvim.attach("socket", path=str(socket))
        wait_for_server(nv)
        nv.command("setlocal indentkeys= noautoindent")
        typed = start_typing(nv, BLOCK_TYPED)
        ghost = wait_for_finished_ghost(nv)
        first_line = ghost.split("\n")[0]

        def screen_with_ghost() -> str | None:
            text = capture(tmux_cmd, colours=False)
            return text if first_line.strip() in text else None

        plain = wait_until(screen_with_ghost, 10, "the ghost text on the terminal")
        assert typed.split("\n")[-1] + first_line in plain, plain
        assert ghost_text(nv) == ghost
        cursor = subprocess.run(
            [*tmux_cmd, "display-message", "-p", "#{cursor_x} #{cursor_y}"], capture_output=True, text=True, check=True
        ).stdout.split()
        png = render(
            capture(tmux_cmd, colours=True),
            artifacts / "neovim-ghost-text.png",
            COLUMNS,
            ROWS,
            cursor=(int(cursor[0]), int(cursor[1])),
        )
        publish_screenshot(png, "neovim-ghost-text.png")
        with contextlib.suppress(EOFError, OSError):  # nvim closes the socket as it quits
            nv.command("qa!")
    finally:
        subprocess.run([*tmux_cmd, "kill-server"], capture_output=True, timeout=30)


def capture(tmux_cmd: list[str], colours: bool) -> str:
    flags = ["-e"] if colours else []
    done = subprocess.run([*tmux_cmd, "capture-pane", "-p", *flags], capture_output=True, text=True, check=True)
    return done.stdout
