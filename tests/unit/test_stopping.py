"""Stop rules cut the completion where the context said it ends, as soon as that is known."""

from __future__ import annotations

import pytest

from lsp_server.engine.stopping import StopRule, rule_for, stop_index, stop_strings, tokens_within
from lsp_server.engine.types import DraftPolicy


def cut(text: str, rule: StopRule) -> str | None:
    i = stop_index(text, rule)
    return None if i is None else text[:i]


def test_line_rule_never_lets_a_second_line_through():
    assert cut("os, sys\nimport re", StopRule("line")) == "os, sys"
    assert cut("os, sys", StopRule("line")) is None  # not known to be finished yet


def test_block_rule_stops_at_the_dedent_that_closes_the_block():
    body = "return a + b\n\n    # done\ndef other():\n    pass"
    assert cut(body, StopRule("block", base_indent=0)) == "return a + b\n\n    # done"


def test_a_draft_counts_up_to_the_token_that_ends_the_answer():
    line, block = StopRule("line"), StopRule("block", base_indent=0)
    assert tokens_within("x = f(", ["a", ")", "\n", "y", " ="], line) == 3  # the newline's
    assert tokens_within("x", ["a", "b"], line) == 2  # not ended: all of it
    # a block ends once the dedented line's first character arrived (the token that brings it)
    assert tokens_within("return 1\n", ["\n", "  x\n", "de", "f"], block) == 3
    assert tokens_within("", [None, "\n"], line) == 2  # a token without text adds none


def test_block_rule_waits_until_a_line_has_content():
    partial = "x = 1\n    y = 2\n  "  # the next line's indentation is not known yet
    assert cut(partial, StopRule("block", base_indent=2)) is None
    assert cut(partial + "z", StopRule("block", base_indent=2)) == "x = 1\n    y = 2"


def test_block_rule_measures_tabs_like_the_policy():
    assert cut("a\n\tb\nc", StopRule("block", base_indent=3)) == "a\n\tb"


@pytest.mark.parametrize("text,expected", [
    ("foo(a,\n    b)\nbar()", "foo(a,\n    b)"),  # a newline inside brackets does not end it
    ("x = 1\ny = 2", "x = 1"),
    ("\nx = 1\ny", "\nx = 1"),  # a leading newline alone is not a statement
])
def test_statement_rule_ends_at_a_newline_outside_brackets(text, expected):
    assert cut(text, StopRule("statement")) == expected


def test_none_rule_never_cuts():
    assert stop_index("a\n\nb", StopRule("none")) is None


def test_text_after_the_cursor_makes_every_context_one_line():
    for kind in ("line", "statement", "block", "none"):
        assert rule_for("):", kind, 4) == StopRule("line")
    assert rule_for("  ", "block", 4) == StopRule("block", base_indent=4)  # only spaces follow
    assert rule_for("", "block", -1) == StopRule("block", base_indent=0)  # top level
    assert rule_for("", "statement", 8) == StopRule("statement")


def test_stop_strings_end_the_text_where_the_first_one_starts():
    rule = StopRule("block", base_indent=0)
    assert stop_index("a + b<|endoftext|>\ndef f():", rule, ("<|endoftext|>",)) == len("a + b")
    assert stop_index("x = 1\ny = 2", StopRule("none"), ("<|fim_pad|>",)) is None
    # the rule cuts sooner than the string: the rule wins
    assert stop_index("x\n    y\nz<|endoftext|>", rule, ("<|endoftext|>",)) == len("x\n    y")


def test_only_the_line_rule_has_a_string_form():
    assert stop_strings(DraftPolicy(stop=StopRule("line"))) == ("\n",)
    for kind in ("statement", "block", "none"):
        assert stop_strings(DraftPolicy(stop=StopRule(kind))) == ()
