"""Random incremental edits, as a client would send them, keep the document and its tree
exactly where a from-scratch computation would put them.

The tree comparison alone cannot catch wrong edit points (tree-sitter re-lexes the edited
region and stores positions relative to siblings), so each edit's bytes and points are also
checked against the client's own arithmetic."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lsp_server.completion.documents import ByteEdit, Document
from lsp_server.syntax.languages import make_parser

EMOJI, CJK = "\U0001F600", "中"
PIECES = ["a", "x", " ", "  ", "(", ")", ":", "=", "1", '"', "#", "\n", "\r\n", "\r",
          EMOJI, CJK, "é", "def f(x):", "return ", "\tpass"]
UNIT_SIZES = {"utf-8": 1, "utf-16": 2, "utf-32": 4}


def client_position(text: str, offset: int, encoding: str) -> tuple[int, int]:
    """The client's own bookkeeping, written independently of lsp_server.completion.documents."""
    codec = {"utf-8": "utf-8", "utf-16": "utf-16-le", "utf-32": "utf-32-le"}[encoding]
    line = column = 0
    index = 0
    while index < offset:
        ch = text[index]
        if ch == "\r" and text[index + 1:index + 2] == "\n":
            line, column, index = line + 1, 0, index + 2
            continue
        if ch in "\r\n":
            line, column = line + 1, 0
        else:
            column += len(ch.encode(codec)) // UNIT_SIZES[encoding]
        index += 1
    return line, column


def client_point(data: bytes) -> tuple[int, int]:
    """tree-sitter's point at the end of `data`: rows end at LF only, columns count bytes."""
    lines = data.split(b"\n")
    return len(lines) - 1, len(lines[-1])


def expected_edit(old_text: str, start: int, end: int, new_text: str) -> ByteEdit:
    head = old_text[:start].encode("utf-8")
    removed, inserted = old_text[start:end].encode("utf-8"), new_text.encode("utf-8")
    return ByteEdit(
        start_byte=len(head),
        old_end_byte=len(head) + len(removed),
        new_end_byte=len(head) + len(inserted),
        start_point=client_point(head),
        old_end_point=client_point(head + removed),
        new_end_point=client_point(head + inserted),
    )


def not_inside_crlf(text: str, offset: int) -> int:
    """A client cannot address the gap inside \\r\\n; step back before the \\r."""
    if 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n":
        return offset - 1
    return offset


texts = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)
edit_ops = st.lists(
    st.tuples(st.floats(0, 1), st.floats(0, 1), texts.map(lambda t: t[:12])),
    min_size=1,
    max_size=12,
)


def run_edits(document: Document, client_text: str, ops, encoding: str) -> str:
    for start_frac, length_frac, new_text in ops:
        start = not_inside_crlf(client_text, int(start_frac * len(client_text)))
        end = not_inside_crlf(client_text, start + int(length_frac * (len(client_text) - start)))
        span = (client_position(client_text, start, encoding),
                client_position(client_text, end, encoding))
        edit = document.apply_change(span, new_text, encoding)
        assert edit == expected_edit(client_text, start, end, new_text)
        client_text = client_text[:start] + new_text + client_text[end:]
        assert document.text == client_text
        assert document.source == client_text.encode("utf-8")
    return client_text


def node_shapes(tree) -> list[tuple]:
    shapes, stack = [], [tree.root_node]
    while stack:
        node = stack.pop()
        shapes.append((node.type, node.start_byte, node.end_byte,
                       tuple(node.start_point), tuple(node.end_point)))
        stack.extend(reversed(node.children))
    return shapes


@settings(max_examples=200, deadline=None)
@given(initial=texts, ops=edit_ops, encoding=st.sampled_from(["utf-8", "utf-16", "utf-32"]))
def test_incremental_edits_reproduce_the_clients_text(initial, ops, encoding):
    document = Document("file:///t.txt", "plaintext", 1, initial)
    run_edits(document, initial, ops, encoding)


@settings(max_examples=200, deadline=None)
@given(initial=texts, ops=edit_ops, encoding=st.sampled_from(["utf-8", "utf-16"]))
def test_incrementally_edited_python_tree_equals_a_fresh_parse(initial, ops, encoding):
    document = Document("file:///t.py", "python", 1, initial, make_parser("python"))
    final_text = run_edits(document, initial, ops, encoding)
    fresh = make_parser("python").parse(final_text.encode("utf-8"))
    assert str(document.tree.root_node) == str(fresh.root_node)
    assert node_shapes(document.tree) == node_shapes(fresh)
