"""The Neovim plugin's pure text helpers (what accept-word and accept-line take), run in
real Neovim without a server: fast, so they belong to the default test run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .nvim_driver import nvim_argv
from .support import missing


@pytest.fixture(scope="module")
def text_module() -> Iterator[Any]:
    try:
        import pynvim
    except ImportError:
        missing("pynvim is not installed: run make setup")
    nv = pynvim.attach("child", argv=nvim_argv("--headless", "--embed"))
    try:

        def call(name: str, *args: Any) -> Any:
            # Lua functions may return several values; the API passes back only one.
            results = nv.exec_lua(f"return {{ require('specfill.text').{name}(...) }}", *args)
            return results[0] if len(results) == 1 else results

        yield call
    finally:
        nv.close()


@pytest.mark.parametrize(
    ("ghost", "word"),
    [
        ("  foo(bar)", "  foo"),
        ("(bar)", "("),
        (" <= 1:", " <="),
        ("\n    return x", "\n    "),
        ("héllo wörld", "héllo"),
        ("x", "x"),
    ],
)
def test_accept_word_takes_blanks_and_one_word_or_punctuation_run(text_module: Any, ghost: str, word: str) -> None:
    assert text_module("next_word", ghost) == word


@pytest.mark.parametrize(
    ("ghost", "line"),
    [
        ("n < 2:\n        return False", "n < 2:"),
        ("\n        return False\n    return True", "\n        return False"),
        ("done", "done"),
    ],
)
def test_accept_line_takes_the_rest_of_the_line_or_the_next_line(text_module: Any, ghost: str, line: str) -> None:
    assert text_module("next_line", ghost) == line


def test_cursor_ends_after_inserted_text_on_one_or_many_lines(text_module: Any) -> None:
    assert text_module("end_position", 2, 4, "abc") == [2, 7]
    assert text_module("end_position", 2, 4, "ab\ncd") == [3, 2]
    assert text_module("end_position", 2, 4, "ab\n") == [3, 0]


def test_insert_text_that_repeats_the_typed_prefix_is_trimmed(text_module: Any) -> None:
    assert text_module("strip_typed", "    if n", 4, 8, "if n < 2:") == " < 2:"
    assert text_module("strip_typed", "    if n", 8, 8, " < 2:") == " < 2:"
    assert text_module("strip_typed", "    if x", 4, 8, "while True:") == "while True:"
