"""Cross-file chunks: imported definitions, similar windows, the budget, the stable order,
and the repository-level layout."""

from __future__ import annotations

from lsp_server.context.cross_file import BLOCK_LINES, CrossFileContext, RepoTokens, display_path, layout_ids
from lsp_server.context.snippets import (Chunk, Import, SourceFile, identifiers, imported_definitions,
                                         jaccard, module_paths, pick_chunks, python_imports,
                                         resolve_module, skeleton, windows)
from lsp_server.syntax.languages import make_parser

PARSER = make_parser("python")
SHAPES = '''import math


def area(radius):
    return math.pi * radius ** 2


class Circle:
    def __init__(self, radius):
        self.radius = radius

    def perimeter(self):
        return 2 * math.pi * self.radius


UNIT = Circle(1)
'''
MAIN = "from .shapes import Circle, area as circle_area\nfrom os import path\n\nc = Circle(2)\n"


def source(path: str, text: str) -> SourceFile:
    return SourceFile(path, text, PARSER.parse(text.encode()), "python")


def count(text: str) -> int:
    return len(text) // 4 + 1


def test_imports_are_read_with_their_level_and_original_names():
    tree = PARSER.parse(MAIN.encode())
    assert python_imports(tree, MAIN.encode()) == [
        Import("shapes", 1, ("Circle", "area")), Import("os", 0, ("path",))]


def test_relative_and_absolute_modules_resolve_to_open_files():
    paths = ["/w/pkg/shapes.py", "/w/pkg/sub/__init__.py", "/w/other/shapes.py"]
    assert resolve_module("/w/pkg/main.py", Import("shapes", 1, ("x",)), paths) == "/w/pkg/shapes.py"
    assert resolve_module("/w/pkg/sub/a.py", Import("", 1, ("x",)), paths) == "/w/pkg/sub/__init__.py"
    assert resolve_module("/w/pkg/sub/a.py", Import("shapes", 2, ("x",)), paths) == "/w/pkg/shapes.py"
    assert resolve_module("/w/x.py", Import("pkg.sub", 0, ("x",)), paths) == "/w/pkg/sub/__init__.py"
    assert resolve_module("/w/x.py", Import("missing", 0, ("x",)), paths) is None
    assert module_paths("/w/pkg/main.py", Import("a.b", 0, ())) == ["/a/b.py", "/a/b/__init__.py"]


def test_the_definitions_of_imported_names_come_from_the_open_module():
    chunks = imported_definitions(source("/w/pkg/main.py", MAIN), [source("/w/pkg/shapes.py", SHAPES)])
    assert [c.text.split("\n")[0] for c in chunks] == ["def area(radius):", "class Circle:"]
    assert all(c.path == "/w/pkg/shapes.py" and c.kind == "definition" for c in chunks)
    assert chunks[0].start_line == 3


def test_a_long_class_is_cut_to_its_skeleton():
    body = "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(30))
    text = "class Big:\n    size = 3\n" + body
    cut = skeleton(text, max_lines=40)
    assert cut.startswith("class Big:\n    size = 3\n    def m0(self):\n")
    assert "return" not in cut and cut.count("\n") <= 40


def test_similarity_picks_the_window_that_shares_identifiers():
    query = identifiers("total = compute_total(order.items, discount_rate)")
    assert jaccard(query, identifiers("def compute_total(items, discount_rate): ...")) > \
        jaccard(query, identifiers("def render_page(template): ..."))
    lines = "".join(f"line_{i} = {i}\n" for i in range(120))
    starts = [s for s, _ in windows(lines, size=50, step=25)]
    assert starts[0] == 0 and starts[-1] == 70


def test_chunks_fill_the_budget_definitions_first_and_come_in_path_order():
    current = source("/w/pkg/main.py", MAIN + "radius = Circle(3).perimeter()\n")
    related = source("/w/pkg/a_geometry.py", "def perimeter(radius):\n    return radius * Circle\n")
    unrelated = source("/w/pkg/b_http.py", "def fetch(url, session):\n    return session.get(url)\n")
    others = [source("/w/pkg/shapes.py", SHAPES), unrelated, related]
    chunks = pick_chunks(current, current.text, others, 10_000, count)
    assert [c.kind for c in chunks if c.path.endswith("shapes.py")] == ["definition", "definition"]
    assert any(c.path.endswith("a_geometry.py") and c.kind == "similar" for c in chunks)
    assert not any(c.path.endswith("b_http.py") for c in chunks)  # nothing in common
    assert [(c.path, c.start_line) for c in chunks] == sorted((c.path, c.start_line) for c in chunks)
    small = pick_chunks(current, current.text, others, 40, count)
    assert sum(count(c.text) + 8 for c in small) <= 40
    assert pick_chunks(current, current.text, others, 0, count) == []


def test_the_layout_is_qwens_repository_format():
    tokens = RepoTokens(repo_name=1000, file_sep=1001)
    chunks = [Chunk("/w/pkg/shapes.py", 3, "def area(r):\n    return r\n", "definition"),
              Chunk("/w/pkg/shapes.py", 8, "class Circle:\n", "definition")]
    ids = layout_ids(chunks, "/w/pkg/main.py", ["/w"], "python", lambda t: [ord(c) for c in t], tokens)
    text = "".join(chr(i) if i < 1000 else {1000: "<R>", 1001: "<F>"}[i] for i in ids)
    assert text == ("<R>w\n<F>pkg/shapes.py\ndef area(r):\n    return r\n# ...\nclass Circle:\n"
                    "<F>pkg/main.py\n")
    assert display_path("/elsewhere/deep/x.py", ["/w"]) == "deep/x.py"


def test_a_plan_is_kept_while_the_cursor_stays_in_its_block():
    context = CrossFileContext()
    tokens = RepoTokens(1000, 1001)
    shapes = source("/w/pkg/shapes.py", SHAPES)

    def plan(line: int, text: str):
        return context.prefix_ids("file:///w/pkg/main.py", source("/w/pkg/main.py", text), line,
                                  text, "", [shapes], ["/w"], 500, lambda t: [ord(c) for c in t], tokens)

    first = plan(3, MAIN)
    assert first.chunks and first.ids[0] == 1000
    # Typing changes the text (and what would be picked), not the plan, inside the block.
    assert plan(4, "from os import path\n").ids == first.ids
    assert plan(BLOCK_LINES + 1, "from os import path\n").chunks == ()
    assert context.prefix_ids("u", source("/w/x.py", MAIN), 0, MAIN, "", [shapes], [], 500,
                              len, None).ids == ()  # a model without the markers: none


def test_opening_another_file_renews_the_plan_once():
    context = CrossFileContext()
    tokens = RepoTokens(1000, 1001)
    current = source("/w/pkg/main.py", MAIN)

    def encode(text):
        return [ord(c) for c in text]

    def plan(others):
        return context.prefix_ids("file:///w/pkg/main.py", current, 3, MAIN, "", others, ["/w"], 500,
                                  encode, tokens)

    assert plan([]).chunks == ()
    shapes = source("/w/pkg/shapes.py", SHAPES)
    renewed = plan([shapes])
    assert renewed.chunks and plan([shapes]) is renewed


def test_a_kept_plan_is_laid_out_again_for_another_codec_with_the_same_chunks():
    from lsp_server.backends.prompt_text import TextCodec

    context = CrossFileContext()
    current, shapes = source("/w/pkg/main.py", MAIN), source("/w/pkg/shapes.py", SHAPES)

    def plan(codec, text=MAIN):
        return context.prefix_ids("file:///w/pkg/main.py", current, 3, text, "", [shapes], ["/w"],
                                  500, codec.encode, codec.repo)

    first_codec, second_codec = TextCodec(), TextCodec()  # a remote request's fresh piece table
    first = plan(first_codec)
    # Typing inside the block changes what would be picked, not the chunks the prompt carries.
    second = plan(second_codec, "from os import path\n")
    assert second.chunks == first.chunks
    assert second_codec.render(list(second.ids)) == first_codec.render(list(first.ids))
    text = first_codec.render(list(first.ids))
    assert text.startswith("<|repo_name|>w\n<|file_sep|>pkg/shapes.py\n")
    assert text.endswith("<|file_sep|>pkg/main.py\n") and "def area(radius):" in text


# --- the package head: outlines of the open files, whatever the cursor and the current file ---

DOCUMENTED = '''"""Shapes."""
import math

SCALE = 2
TABLE = {
    "a": 1,
}


@cache
def area(radius: float,
         precise: bool = False) -> float:  # a comment
    """The area of a circle.

    More words.
    """
    return math.pi * radius ** 2


class Circle(Shape):
    """A round shape."""
    sides = 0

    def perimeter(self):
        return 2 * math.pi * self.radius
'''


def test_an_outline_keeps_signatures_docstring_lines_and_members_not_bodies():
    from lsp_server.context.snippets import outline_chunk

    chunk = outline_chunk(source("/w/pkg/shapes.py", DOCUMENTED), 500, count)
    assert chunk.text == (
        'SCALE = 2\nTABLE = ...\n@cache\ndef area(radius: float,\n         precise: bool = False) -> float:\n'
        '    """The area of a circle."""\nclass Circle(Shape):\n    """A round shape."""\n'
        '    sides = 0\n    def perimeter(self):\n        ...\n')
    short = outline_chunk(source("/w/pkg/shapes.py", DOCUMENTED), 12, count)
    assert short.text == "SCALE = 2\nTABLE = ...\n"  # whole items within the budget: no half signature
    plain = outline_chunk(SourceFile("/w/a.js", "let a = 1;\nlet b = 2;\n", None, "javascript"), 500, count)
    assert plain.text == "let a = 1;\nlet b = 2;\n"  # no outline: the first lines


def test_the_package_plan_ignores_the_cursor_and_the_prompt_of_a_file_opened_next_starts_with_its_warm():
    from lsp_server.context.cross_file import package_head_ids

    context, tokens = CrossFileContext(), RepoTokens(1000, 1001)
    tabs = [source("/w/pkg/shapes.py", DOCUMENTED), source("/w/pkg/base.py", SHAPES)]
    encode = lambda t: [ord(c) for c in t]  # noqa: E731
    warmed = package_head_ids(tabs, ["/w"], "python", 400, encode, tokens)

    def plan(uri_path: str, line: int, others):
        current = source(uri_path, MAIN)
        return context.prefix_ids("file://" + uri_path, current, line, MAIN, "", others, ["/w"], 400,
                                  encode, tokens, "package")

    first = plan("/w/pkg/main.py", 3, tabs)
    assert list(first.ids[:len(warmed)]) == warmed and len(first.ids) > len(warmed)
    assert [c.path for c in first.chunks] == ["/w/pkg/shapes.py", "/w/pkg/base.py"]  # open order
    assert plan("/w/pkg/main.py", 3 + 5 * BLOCK_LINES, tabs) is first  # a jump keeps the head
    later = [*tabs, source("/w/pkg/more.py", SHAPES)]
    assert plan("/w/pkg/main.py", 3, later) is first  # a tab opened since waits: a switch back hits
    renewed = plan("/w/pkg/main.py", 3, tabs[1:])  # a file of its head closed: a new head
    assert [c.path for c in renewed.chunks] == ["/w/pkg/base.py"]
    assert sum(len(encode(c.text)) + 8 for c in first.chunks) <= 400
    # A file opened later appends its outline: the head warmed before it stays a prefix.
    assert package_head_ids(later, ["/w"], "python", 400, encode, tokens)[:len(warmed)] == warmed


def test_the_package_head_keeps_the_newest_files_that_fit_each_within_a_fixed_share():
    from lsp_server.context.snippets import PACKAGE_SHARE, package_chunks

    tabs = [source(f"/w/pkg/m{i}.py", DOCUMENTED) for i in range(8)]
    chunks = package_chunks(tabs, 300, count)
    assert [c.path for c in chunks] == [t.path for t in tabs[-len(chunks):]]  # newest, in open order
    assert 1 < len(chunks) < 8
    assert all(count(c.text) <= 300 // PACKAGE_SHARE for c in chunks)
    assert package_chunks(tabs[:3], 300, count)[0] == package_chunks(tabs[:4], 300, count)[0]
