"""The Neovim plugin in real Neovim 0.11 (headless, driven by pynvim) against `specfill serve`
with the real default models: streamed ghost text, partial and full acceptance, dismissal,
and cancellation of a stale request."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .nvim_driver import (
    buffer_text,
    ghost_text,
    nvim_argv,
    setup_lua,
    start_typing,
    suggestion,
    wait_for_finished_ghost,
    wait_for_server,
    wait_until,
)
from .support import BLOCK_TYPED, SOURCE, STATEMENT_TYPED, UNPREDICTED_TYPED, missing

pytestmark = pytest.mark.editors

# What "accept word" takes, as the plugin's README defines it: blanks and one word, or blanks
# and one run of punctuation, or a line break and the next line's indentation.
NEXT_WORD = re.compile(r"[ \t]*(?:[\w\x80-\U0010ffff]+|[^\w\s\x80-\U0010ffff]+)|\r?\n[ \t]*", re.ASCII)


def expected_next_word(text: str) -> str:
    match = NEXT_WORD.match(text)
    return match.group(0) if match else text


@pytest.fixture(scope="module")
def nvim(specfill_exe: Path, default_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    try:
        import pynvim
    except ImportError:
        missing("pynvim is not installed: run make setup")
    source = tmp_path_factory.mktemp("nvim") / "primes.py"
    source.write_text(SOURCE)
    nv = pynvim.attach("child", argv=nvim_argv("--headless", "--embed"))
    try:
        nv.exec_lua(setup_lua(specfill_exe))
        nv.command(f"edit {source}")
        # Python's indent rules re-indent on some keys; the tests type exact text.
        nv.command("setlocal indentkeys= noautoindent")
        nv.exec_lua(
            """
            _G.specfill_test = { cancelled = {}, sent = 0, answered = 0 }
            vim.api.nvim_create_autocmd('LspRequest', { callback = function(args)
              local request = args.data.request
              if request.method ~= 'textDocument/inlineCompletion' then return end
              if request.type == 'cancel' then
                table.insert(_G.specfill_test.cancelled, args.data.request_id)
              elseif request.type == 'pending' then
                _G.specfill_test.sent = _G.specfill_test.sent + 1
              elseif request.type == 'complete' then
                _G.specfill_test.answered = _G.specfill_test.answered + 1
              end
            end })
            """
        )
        wait_for_server(nv)
        yield nv
    finally:
        nv.close()


def server_stats(nv: Any) -> dict[str, Any]:
    """`specfill/stats`, fetched through the plugin's own request."""
    stats = nv.exec_lua(
        """
        local result
        require('specfill').stats(function(err, stats) result = err and { error = err.message } or stats end)
        vim.wait(10000, function() return result ~= nil end)
        return result
        """
    )
    assert stats is not None and "error" not in stats, stats
    return stats


def test_ghost_text_appears_from_the_server_and_grows_while_streaming(nvim: Any) -> None:
    typed = start_typing(nvim, BLOCK_TYPED)
    seen: list[str] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        text = ghost_text(nvim)
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        state = suggestion(nvim)
        if state and state.done:
            break
        time.sleep(0.02)
    final = wait_for_finished_ghost(nvim)
    assert ghost_text(nvim) == final
    assert len(seen) >= 2, f"ghost text never changed while streaming: {seen!r}"
    assert len(seen[-1]) > len(seen[0]), f"ghost text did not grow: {seen!r}"
    assert "\n" in final, f"a block completion shows more than one line: {final!r}"
    assert buffer_text(nvim) == typed, "ghost text must stay virtual until accepted"


def test_accept_word_line_and_all_insert_exactly_the_suggestion(nvim: Any) -> None:
    typed = start_typing(nvim, BLOCK_TYPED)
    ghost = wait_for_finished_ghost(nvim)

    word = expected_next_word(ghost)
    nvim.input("<M-w>")
    wait_until(lambda: buffer_text(nvim) == typed + word, 5, f"accept-word to insert {word!r}")
    assert ghost_text(nvim) == ghost[len(word):]

    rest = ghost[len(word):]
    line = re.match(r"\n?[^\n]*", rest).group(0)
    if line:
        nvim.input("<M-l>")
        wait_until(lambda: buffer_text(nvim) == typed + word + line, 5, f"accept-line to insert {line!r}")

    if len(word) + len(line) < len(ghost):
        nvim.input("<Tab>")
    wait_until(lambda: buffer_text(nvim) == typed + ghost, 5, "accept-all to insert the rest of the suggestion")
    assert nvim.api.get_mode()["mode"] == "i"


def requests(nv: Any) -> tuple[int, int]:
    """(inlineCompletion requests sent, answered) so far."""
    counts = nv.exec_lua("return { _G.specfill_test.sent, _G.specfill_test.answered }")
    return counts[0], counts[1]


def test_typing_the_suggested_characters_keeps_the_ghost_text_steady_and_asks_nothing(nvim: Any) -> None:
    typed = start_typing(nvim, STATEMENT_TYPED)
    ghost = wait_for_finished_ghost(nvim)
    first_line = ghost.split("\n")[0]
    assert len(first_line) >= 2, f"the statement's suggestion starts on its line: {ghost!r}"
    sent = requests(nvim)[0]
    keys = first_line[:min(4, len(ghost) - 1)]  # typing all of it would end the suggestion
    for n, char in enumerate(keys, 1):
        nvim.input(char.replace("<", "<lt>"))
        wait_until(lambda: buffer_text(nvim) == typed + first_line[:n], 5, f"{char!r} typed")
        # Read back right after each key and for 100 ms after it: never blank, never stale.
        seen = set()
        deadline = time.monotonic() + 0.1
        while time.monotonic() < deadline:
            seen.add(ghost_text(nvim))
        assert seen == {ghost[n:]}, f"after typing {first_line[:n]!r} the ghost text read {seen!r}"
    assert requests(nvim)[0] == sent, "typing what the ghost text shows must not ask the server again"


def test_accepting_all_of_a_suggestion_asks_for_the_next_at_once_and_it_comes_precomputed(nvim: Any) -> None:
    start_typing(nvim, BLOCK_TYPED)
    wait_for_finished_ghost(nvim)
    # The server generates, in the background, what accepting all of it (and, for several
    # lines, its first line) would be asked next. Wait until it has finished them: the
    # count stays put for 3 s.
    def settled() -> dict | None:
        first = server_stats(nvim)["reuse"]
        time.sleep(3)
        again = server_stats(nvim)["reuse"]
        return again if again["precomputes"] == first["precomputes"] else None

    reuse = wait_until(settled, 300, "the precomputes to finish", interval=0)
    sent, answered = requests(nvim)
    # A long debounce: a request that comes within it was sent by the accept itself.
    nvim.exec_lua("require('specfill').config.debounce_ms = 3000")
    try:
        nvim.input("<Tab>")
        wait_until(lambda: requests(nvim)[0] > sent, 1.5, "a request for the next suggestion right after the accept")
        wait_until(lambda: requests(nvim)[1] > answered, 5, "the next suggestion's answer")
        time.sleep(3.5)  # past the debounce: no second request for the same spot
    finally:
        nvim.exec_lua("require('specfill').config.debounce_ms = 150")
    after = server_stats(nvim)["reuse"]
    from_earlier = lambda r: r["precomputed_hits"] + r["answers_from_generation"]  # noqa: E731
    assert from_earlier(after) == from_earlier(reuse) + 1, (reuse, after)
    assert requests(nvim)[0] == sent + 1, "one request after an accept, not a second one after the debounce"


def test_escape_dismisses_the_ghost_text_without_changing_the_buffer(nvim: Any) -> None:
    typed = start_typing(nvim, STATEMENT_TYPED)
    wait_until(lambda: ghost_text(nvim), 300, "ghost text")
    nvim.input("<Esc>")
    wait_until(lambda: nvim.api.get_mode()["mode"] == "n", 5, "normal mode")
    wait_until(lambda: ghost_text(nvim) == "" and suggestion(nvim) is None, 5, "the ghost text to disappear")
    assert buffer_text(nvim) == typed


def test_typing_while_a_request_runs_cancels_it_and_completes_the_new_position(nvim: Any) -> None:
    cancelled_before = server_stats(nvim)["totals"]["cancelled"]
    # Not STATEMENT_TYPED: the block suggestions above start with "if n", and typing through
    # a suggestion is answered from the generation the server already has, before a second
    # key could cancel it. A statement the model did not predict needs a real generation.
    start_typing(nvim, UNPREDICTED_TYPED)
    first = wait_until(lambda: (s := suggestion(nvim)) and s.pending and s.request_id, 30, "a pending request")
    # Typing on makes the first request stale. " %" is unlikely to be what the model
    # predicts: typing exactly the ghost text would (rightly) keep the suggestion instead.
    nvim.input(" %")
    wait_until(
        lambda: first in nvim.exec_lua("return _G.specfill_test.cancelled"),
        10,
        f"request {first} to be cancelled",
    )
    typed = SOURCE + UNPREDICTED_TYPED + " %"
    ghost = wait_for_finished_ghost(nvim)
    assert buffer_text(nvim) == typed
    assert ghost_text(nvim) == ghost
    assert server_stats(nvim)["totals"]["cancelled"] > cancelled_before


def test_stats_report_acceptance_rate_and_speed_of_the_last_completion(nvim: Any) -> None:
    stats = server_stats(nvim)
    assert stats["last"] is not None
    assert 0.0 <= stats["last"]["acceptance_rate"] <= 1.0
    assert stats["last"]["tokens_per_s"] > 0
    nvim.exec_lua("_G.specfill_test.notes = {} vim.notify = function(msg) table.insert(_G.specfill_test.notes, msg) end")
    nvim.command("SpecfillStats")
    notes = wait_until(lambda: nvim.exec_lua("return _G.specfill_test.notes"), 10, ":SpecfillStats to report")
    assert re.search(r"last completion: \d+% accepted · [\d.]+ tok/s", notes[0]), notes
