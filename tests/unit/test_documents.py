"""Document state: LSP positions in every encoding, clamping, incremental edits, the store."""

from __future__ import annotations

import pytest
from lsprotocol import types

from lsp_server.completion.documents import (
    Document,
    DocumentStore,
    advance_point,
    byte_offset,
    byte_point,
    offset_to_position,
    position_to_offset,
    units,
)
from lsp_server.syntax.languages import make_parser

EMOJI = "\U0001F600"  # astral: 2 UTF-16 units, 4 UTF-8 bytes
CJK = "中"  # 1 UTF-16 unit, 3 UTF-8 bytes


def fresh_tree_shape(language_id: str, source: bytes) -> list[tuple]:
    parser = make_parser(language_id)
    assert parser is not None
    return tree_shape(parser.parse(source))


def tree_shape(tree) -> list[tuple]:
    shape, cursor, done = [], tree.walk(), False
    while not done:
        node = cursor.node
        shape.append((node.type, node.start_byte, node.end_byte, tuple(node.start_point),
                      tuple(node.end_point), node.is_missing))
        if cursor.goto_first_child() or cursor.goto_next_sibling():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                done = True
                break
    return shape


# --- positions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "character", "expected"),
    [("utf-16", 3, 2), ("utf-16", 4, 3), ("utf-8", 5, 2), ("utf-8", 6, 3), ("utf-32", 3, 3)],
)
def test_emoji_counts_as_two_utf16_units_and_four_utf8_bytes(encoding, character, expected):
    text = f"a{EMOJI}b{EMOJI}c"
    assert position_to_offset(text, 0, character, encoding) == expected


@pytest.mark.parametrize(("encoding", "character"), [("utf-16", 2), ("utf-8", 6), ("utf-32", 2)])
def test_cjk_position_after_two_characters(encoding, character):
    text = f"{CJK}{CJK}x = 1"
    assert text[position_to_offset(text, 0, character, encoding):] == "x = 1"


def test_position_inside_a_character_rounds_down_to_its_start():
    text = f"a{EMOJI}b"
    assert position_to_offset(text, 0, 2, "utf-16") == 1  # between the surrogates
    assert position_to_offset(text, 0, 3, "utf-8") == 1  # inside the 4 bytes


def test_crlf_and_lone_cr_and_lf_all_end_lines():
    text = "one\r\ntwo\rthree\nfour"
    starts = [position_to_offset(text, line, 0) for line in range(4)]
    assert [text[start:start + 3] for start in starts] == ["one", "two", "thr", "fou"]


def test_character_past_line_end_clamps_before_the_line_break():
    text = "ab\r\ncd"
    assert position_to_offset(text, 0, 99) == 2
    assert position_to_offset(text, 1, 99) == 6


def test_line_past_the_last_clamps_to_end_of_text_and_negatives_to_start():
    text = "ab\ncd\n"
    assert position_to_offset(text, 2, 0) == 6
    assert position_to_offset(text, 50, 3) == 6
    assert position_to_offset(text, -1, 5) == 0
    assert position_to_offset(text, 1, -4) == 3
    assert position_to_offset("", 3, 3) == 0


def test_offset_to_position_inverts_position_to_offset():
    text = f"x{EMOJI}\r\n{CJK}y\rz\n"
    for encoding in ("utf-8", "utf-16", "utf-32"):
        for offset in range(len(text) + 1):
            if text[offset - 1:offset + 1] == "\r\n":
                continue
            line, character = offset_to_position(text, offset, encoding)
            assert position_to_offset(text, line, character, encoding) == offset


def test_offset_between_cr_and_lf_maps_to_end_of_line():
    assert offset_to_position("ab\r\ncd", 3) == (0, 2)


def test_units_per_encoding():
    text = f"a{EMOJI}{CJK}"
    assert (units(text, "utf-8"), units(text, "utf-16"), units(text, "utf-32")) == (8, 4, 3)


# --- bytes and points ------------------------------------------------------------------


def test_byte_offset_counts_utf8_bytes():
    assert byte_offset(f"{CJK}{EMOJI}x", 2) == 7


def test_tree_sitter_rows_end_only_at_lf_not_at_lone_cr():
    source = "a\rb\r\ncd".encode()
    assert byte_point(source, 2) == (0, 2)
    assert byte_point(source, 5) == (1, 0)
    assert byte_point(source, 7) == (1, 2)


def test_advance_point_over_inserted_lines():
    assert advance_point((3, 4), b"xy") == (3, 6)
    assert advance_point((3, 4), b"x\nyz\n\xe4\xb8\xad") == (5, 3)


# --- Document ------------------------------------------------------------------------


def test_incremental_edit_with_emoji_matches_a_fresh_parse():
    doc = Document("file:///a.py", "python", 1, f"s = '{EMOJI}'\nx = 1\n", make_parser("python"))
    # Replace "1" on line 1 with a call, in UTF-16 units.
    edit = doc.apply_change(((1, 4), (1, 5)), "f(\n  2)", "utf-16")
    assert doc.text == f"s = '{EMOJI}'\nx = f(\n  2)\n"
    assert doc.source == doc.text.encode()
    assert edit is not None and edit.start_byte == len(f"s = '{EMOJI}'\nx = ".encode())
    assert tree_shape(doc.tree) == fresh_tree_shape("python", doc.source)


def test_edit_after_cjk_in_utf8_positions():
    doc = Document("file:///a.py", "python", 1, f"# {CJK}{CJK}\nx = 1\n", make_parser("python"))
    doc.apply_change(((0, 8), (0, 8)), "!", "utf-8")
    assert doc.text == f"# {CJK}{CJK}!\nx = 1\n"


def test_out_of_range_edit_appends_at_end_of_line():
    doc = Document("file:///a.txt", "plaintext", 1, "ab\r\ncd")
    doc.apply_change(((0, 40), (0, 90)), "X")
    assert doc.text == "abX\r\ncd"


def test_reversed_range_is_treated_as_its_normal_order():
    doc = Document("file:///a.txt", "plaintext", 1, "abcdef")
    doc.apply_change(((0, 4), (0, 1)), "-")
    assert doc.text == "a-ef"


def test_full_replace_reparses():
    doc = Document("file:///a.py", "python", 1, "x = (", make_parser("python"))
    assert doc.tree.root_node.has_error
    doc.apply_change(None, "x = 1\n")
    assert not doc.tree.root_node.has_error
    assert doc.source == b"x = 1\n"


def test_document_without_grammar_keeps_text_and_no_tree():
    doc = Document("file:///a.txt", "plaintext", 1, "hello")
    doc.apply_change(((0, 5), (0, 5)), f" {EMOJI}")
    assert doc.tree is None and doc.text == f"hello {EMOJI}"


def test_lone_surrogate_from_json_does_not_crash_and_keeps_bytes_in_step():
    doc = Document("file:///a.py", "python", 1, "s = '\ud83d'\n", make_parser("python"))
    doc.apply_change(((0, 8), (0, 8)), "x", "utf-8")  # after the surrogate's 3 bytes
    assert doc.text == "s = '\ud83dx'\n"
    assert doc.source == doc.text.encode("utf-8", "surrogatepass")


def test_cursor_byte_offset_and_prefix_suffix():
    doc = Document("file:///a.py", "python", 1, f"{CJK} = 1\nprint({CJK})\n")
    assert doc.cursor_byte_offset(1, 6, "utf-16") == len(f"{CJK} = 1\nprint(".encode())
    assert doc.prefix_suffix(1, 7, "utf-16") == (f"{CJK} = 1\nprint({CJK}", ")\n")
    assert doc.prefix_suffix(1, 9, "utf-8") == (f"{CJK} = 1\nprint({CJK}", ")\n")


# --- DocumentStore -------------------------------------------------------------------


def test_change_on_unknown_uri_reports_and_leaves_store_unchanged():
    store = DocumentStore()
    outcome = store.change("file:///nope.py", 2, [(None, "x")])
    assert not outcome.ok and "not open" in outcome.error
    assert outcome.document is None and len(store) == 0 and store.get("file:///nope.py") is None


def test_changes_apply_in_order_each_on_the_previous_result():
    store = DocumentStore()
    store.open("file:///a.py", "python", 1, "ab")
    outcome = store.change("file:///a.py", 2, [(((0, 2), (0, 2)), "c"), (((0, 3), (0, 3)), "d")])
    assert outcome.ok and outcome.warning is None
    assert outcome.document.text == "abcd" and outcome.document.version == 2


def test_stale_version_warns_but_applies():
    store = DocumentStore()
    store.open("file:///a.py", "python", 5, "x")
    outcome = store.change("file:///a.py", 5, [(None, "y")])
    assert outcome.ok and "not newer than 5" in outcome.warning
    assert store.get("file:///a.py").text == "y"


def test_malformed_change_is_reported_and_nothing_is_applied():
    store = DocumentStore()
    store.open("file:///a.py", "python", 1, "keep")
    outcome = store.change("file:///a.py", 2, [(None, "new"), (None, 42)])
    assert not outcome.ok and "malformed" in outcome.error
    document = store.get("file:///a.py")
    assert document.text == "keep" and document.version == 1


def test_lsprotocol_change_objects_are_accepted():
    store = DocumentStore()
    store.open("file:///a.py", "python", 1, f"a{EMOJI}c\n")
    rng = types.Range(types.Position(0, 3), types.Position(0, 4))
    outcome = store.change(
        "file:///a.py",
        2,
        [types.TextDocumentContentChangePartial(range=rng, text="b")],
        types.PositionEncodingKind.Utf16,
    )
    assert outcome.document.text == f"a{EMOJI}b\n"
    store.change("file:///a.py", 3, [types.TextDocumentContentChangeWholeDocument(text="z")])
    assert store.get("file:///a.py").text == "z"


def test_unknown_language_has_no_tree_and_known_alias_has_one():
    store = DocumentStore()
    assert store.open("file:///a.md", "markdown", 1, "# hi").tree is None
    assert store.open("file:///b.rs", "rs", 1, "fn main() {}").tree is not None


def test_close_and_reopen():
    store = DocumentStore()
    store.open("file:///a.py", "python", 1, "old")
    store.open("file:///a.py", "python", 1, "new")
    assert store.get("file:///a.py").text == "new" and "file:///a.py" in store
    assert store.close("file:///a.py") is True
    assert store.close("file:///a.py") is False and len(store) == 0
