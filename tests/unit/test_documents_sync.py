"""A client whose buffer differs from ours: edits that cannot fit mark the document out of
sync (no completions) until a full text arrives; documents over the size limit are not kept."""

from __future__ import annotations

import pytest

from lsp_server.completion.documents import DocumentStore, exact_offset

EMOJI = "\U0001F600"  # two UTF-16 units, four UTF-8 bytes
CJK = "\u4e2d"  # one UTF-16 unit, three UTF-8 bytes


@pytest.mark.parametrize("text,line,char,enc,expected", [
    ("ab\ncd", 0, 2, "utf-16", 2),
    ("ab\ncd", 1, 2, "utf-16", 5),
    ("ab\r\ncd", 0, 2, "utf-16", 2),
    ("ab\n", 1, 0, "utf-16", 3),  # the empty last line
    ("ab\ncd", 0, 3, "utf-16", None),  # past the line end
    ("ab\ncd", 2, 0, "utf-16", None),  # past the last line
    ("ab", -1, 0, "utf-16", None),
    (f"a{EMOJI}b", 0, 2, "utf-16", None),  # half a surrogate pair
    (f"a{EMOJI}b", 0, 3, "utf-16", 2),
    (f"{CJK}x", 0, 1, "utf-8", None),  # inside a UTF-8 sequence
    (f"{CJK}x", 0, 3, "utf-8", 1),
    (f"{EMOJI}x", 0, 1, "utf-32", 1),
])
def test_exact_offset_accepts_only_positions_inside_the_text(text, line, char, enc, expected):
    assert exact_offset(text, line, char, enc) == expected


@pytest.mark.parametrize("span,what", [
    (((0, 4), (0, 1)), "reversed"),
    (((0, 1), (0, 99)), "outside"),
    (((7, 0), (7, 0)), "outside"),
    (((0, 2), (0, 3)), "outside"),  # inside the emoji
])
def test_an_edit_that_does_not_fit_marks_the_document_out_of_sync(span, what):
    store = DocumentStore()
    store.open("file:///a.py", "python", 1, f"a{EMOJI}cdef\nxy")
    outcome = store.change("file:///a.py", 2, [(span, "Z")])
    assert outcome.ok and outcome.problem.startswith("out of sync") and what in outcome.problem
    doc = store.get("file:///a.py")
    assert doc.problem == outcome.problem and "Z" not in doc.text
    # later edits are not applied and do not report again; a full text resyncs
    again = store.change("file:///a.py", 3, [(((0, 0), (0, 0)), "Q")])
    assert again.problem is None and "Q" not in doc.text and doc.problem
    store.change("file:///a.py", 4, [(None, "fresh")])
    assert doc.problem is None and doc.text == "fresh"


def test_reopening_an_out_of_sync_document_brings_it_back():
    store = DocumentStore()
    store.open("file:///a.py", "python", 1, "abc")
    store.change("file:///a.py", 2, [(((0, 9), (0, 9)), "x")])
    assert store.get("file:///a.py").problem
    assert store.open("file:///a.py", "python", 3, "abc").problem is None


def test_documents_over_the_limit_are_not_kept_until_a_full_text_fits():
    store = DocumentStore(max_bytes=100)
    big = store.open("file:///big.py", "python", 1, "x" * 101)
    assert big.text == "" and big.tree is None and "larger than" in big.problem
    small = store.open("file:///s.py", "python", 1, "x" * 90)
    outcome = store.change("file:///s.py", 2, [(((0, 90), (0, 90)), "y" * 20)])
    assert "larger than" in outcome.problem and small.text == "" and small.problem
    store.change("file:///s.py", 3, [(None, "ok = 1\n")])
    assert small.problem is None and small.text == "ok = 1\n" and small.tree is not None
