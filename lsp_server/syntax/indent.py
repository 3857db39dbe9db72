"""Text-only cursor context: the shared line/indentation helpers, and the fallback
classifier for languages without a grammar (Lua, shell, YAML, plain text...).

`context.py` builds on the helpers here (cursor line, indentation headers, keyword sets,
the complexity rule); `classify_by_indentation` is the whole answer when there is no tree.
Never raises: any text at any offset gives a context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The block stop rule's measure of a dedent: the cursor's lines are measured the same way.
from lsp_server.engine.stopping import indent_width
from lsp_server.syntax.types import ContextKind, SyntaxContext

IMPORT_WORDS = frozenset(
    {"import", "from", "use", "using", "require", "include", "#include", "#import", "package"}
)
DEF_WORDS = frozenset({"def", "function", "fn", "func", "fun", "sub", "proc"})
# Control flow that makes a body "complex": branches and loops (not with/try).
CONTROL_WORDS = frozenset(
    {"if", "elif", "else", "unless", "for", "foreach", "while", "until", "do", "loop",
     "switch", "case", "match", "select", "when"}
)
# Bodies that hold declarations in a row (fields, variants, members): boilerplate.
CONTAINER_WORDS = frozenset(
    {"class", "struct", "enum", "interface", "impl", "trait", "union", "record", "namespace",
     "mod", "module", "object", "type"}
)
MODIFIERS = frozenset(
    {"export", "default", "async", "pub", "public", "private", "protected", "internal", "static",
     "final", "abstract", "inline", "virtual", "extern", "unsafe", "override", "declare",
     "readonly", "synchronized", "local", "const", "constexpr"}
)

# Control-flow nesting plus binary operators per line at or above this makes a body complex.
COMPLEXITY_THRESHOLD = 2.0
# Lines (the cursor line and those just above it) over which operator density is measured.
DENSITY_LINES = 4
# No scan before the cursor reads more than this many bytes, whatever the line lengths.
MAX_WINDOW_BYTES = 4096

_WORD = re.compile(r"#?[A-Za-z_]\w*|@|\S")
_OPERATOR = re.compile(
    r"\*\*=?|//=?|<<=?|>>=?|<=|>=|==|!=|&&|\|\||(?<![-=<>!+*/%&|^])[-+*/%&|^]=?(?![-=>+&|])"
    r"|(?<![-=<>!])[<>](?![-=<>])|\b(?:and|or)\b"
)
_STRING_LITERAL = re.compile(r"\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'")


@dataclass(frozen=True)
class CursorLine:
    start: int  # byte offset where the cursor's line begins
    end: int  # byte offset of its end (the newline, or end of text)
    prefix: str  # text before the cursor on the line
    suffix: str  # text after the cursor on the line
    indent: int  # the line's indentation; on a blank line, the whitespace typed so far

    @property
    def at_line_start(self) -> bool:
        return not self.prefix.strip()


def cursor_line(source: bytes, offset: int) -> CursorLine:
    offset = max(0, min(offset, len(source)))
    start = source.rfind(b"\n", 0, offset) + 1
    end = source.find(b"\n", offset)
    if end < 0:
        end = len(source)
    prefix = source[start:offset].decode("utf-8", "replace")
    suffix = source[offset:end].decode("utf-8", "replace").rstrip("\r")
    return CursorLine(start, end, prefix, suffix, indent_width(prefix + suffix))


def line_start_at(source: bytes, pos: int) -> int:
    return source.rfind(b"\n", 0, pos) + 1


def line_indent_at(source: bytes, pos: int) -> int:
    """Indentation of the line holding byte `pos`."""
    start = line_start_at(source, pos)
    end = source.find(b"\n", start)
    return indent_width(source[start : end if end >= 0 else len(source)].decode("utf-8", "replace"))


def lines_back(source: bytes, line_start: int, count: int) -> int:
    """Byte offset of the start of the line `count` lines above the one at `line_start`."""
    pos = line_start
    for _ in range(count):
        if pos == 0:
            break
        pos = source.rfind(b"\n", 0, pos - 1) + 1
    return pos


def window_start(source: bytes, line_start: int, offset: int, lines: int) -> int:
    """Where a scan of the `lines` lines above the cursor begins, capped at MAX_WINDOW_BYTES
    so that one enormous minified line costs no more than a normal file."""
    return max(lines_back(source, line_start, lines), offset - MAX_WINDOW_BYTES)


def head_word(text: str) -> str:
    """The first word of a line of code, modifiers (pub, async, export...) and closing
    braces skipped: "def", "for", "#include", "@", "x"; "" for a blank line."""
    for match in _WORD.finditer(text):
        word = match.group()
        if word in MODIFIERS or word in "})]":
            continue
        return word
    return ""


@dataclass(frozen=True)
class Header:
    """A line above the cursor that opens a block the cursor sits in (by indentation)."""

    start: int  # byte offset of the header's first non-blank character
    line_start: int
    indent: int
    word: str  # its head word


def enclosing_headers(source: bytes, line_start: int, indent: int, max_lines: int = 400) -> list[Header]:
    """Walk up from the cursor line: each earlier non-blank line with less indentation than
    everything seen so far opens an enclosing block. Innermost first; stops at column 0.
    Works on bytes and decodes only the headers: this runs on every keystroke."""
    headers: list[Header] = []
    limit = indent
    pos = line_start
    for _ in range(max_lines):
        if limit == 0 or pos == 0:
            break
        start = source.rfind(b"\n", 0, pos - 1) + 1
        raw = source[start : pos - 1]
        pos = start
        code = raw.lstrip(b" \t")
        lead = len(raw) - len(code)
        if lead >= limit or not code.strip():
            continue  # a tab is at least one column, so this line is not less indented
        if code.startswith((b"#", b"//")) and not code.startswith((b"#[", b"#include")):
            continue
        width = indent_width(raw[:lead].decode("ascii"))
        if width < limit:
            word = head_word(code.decode("utf-8", "replace"))
            headers.append(Header(start + len(raw) - len(code), start, width, word))
            limit = width
    return headers


def is_docstring_position(source: bytes, pos: int, max_lines: int = 50) -> bool:
    """A string opening at byte `pos` is a docstring: it is the first thing on its line, and
    the previous non-blank line is a `def`/`class` header ending in `:`, or only blank lines
    and comments come before it (a module docstring)."""
    start = line_start_at(source, pos)
    if source[start:pos].strip():
        return False
    for _ in range(max_lines):
        if start == 0:
            return True
        previous = source.rfind(b"\n", 0, start - 1) + 1
        stripped = source[previous : start - 1].decode("utf-8", "replace").strip()
        start = previous
        if stripped and not stripped.startswith("#"):
            return stripped.endswith(":") and head_word(stripped) in ("def", "class")
    return False


def operator_density(lines: list[str]) -> float:
    """Binary/comparison/boolean operators per non-blank line (string literals ignored)."""
    code = [_STRING_LITERAL.sub('""', line) for line in lines if line.strip()]
    if not code:
        return 0.0
    return sum(len(_OPERATOR.findall(line)) for line in code) / len(code)


def is_complex(control_depth: int, op_density: float) -> bool:
    """The one rule for complex vs simple bodies: each enclosing if/for/while/match/switch
    inside the function counts 1, each binary operator per line near the cursor counts 1;
    a total of COMPLEXITY_THRESHOLD or more is complex. So two nested loops are complex, a
    loop with arithmetic is complex, straight-line assignments are simple."""
    return control_depth + op_density >= COMPLEXITY_THRESHOLD


# ---------------------------------------------------------------------------------------
# The fallback classifier: characters and indentation only.

_WINDOW_LINES = 30


@dataclass
class _Open:
    char: str  # ( [ {
    before: str  # the non-blank text on its line before it
    line_head: str  # head word of its line
    line_indent: int
    line_no: int


@dataclass
class _TextScan:
    brackets: list[_Open]
    quote: str | None = None  # the open string's delimiter at the cursor
    quote_pos: int = -1
    line_comment: str | None = None  # "line" | "doc": a comment running to the end of the line
    block_comment: str | None = None  # "block" | "doc": a comment waiting for `*/`

    @property
    def comment(self) -> str | None:
        return self.block_comment or self.line_comment


# The only characters the text scanner must look at; everything else is skipped in C.
_TEXT_TOKEN = re.compile(r"\"\"\"|'''|/\*[*!]?|\*/|//[/!]?|--|#|\\.|[\"'`()\[\]{}]|\n")


def _scan_text(text: str) -> _TextScan:
    """One pass over the window text tracking brackets, strings and comments."""
    scan = _TextScan(brackets=[])
    line_no, line_start, pos = 0, 0, 0
    while (match := _TEXT_TOKEN.search(text, pos)) is not None:
        token, at, pos = match.group(), match.start(), match.end()
        if token == "\n":
            scan.line_comment = None
            if scan.quote is not None and len(scan.quote) == 1 and scan.quote != "`":
                scan.quote = None  # a single-quoted string does not run past its line
            line_no, line_start = line_no + 1, pos
        elif scan.block_comment is not None:
            if token == "*/":
                scan.block_comment = None
        elif scan.line_comment is not None:
            continue
        elif scan.quote is not None:
            if token == scan.quote:
                scan.quote = None
        elif token.startswith("/*"):
            scan.block_comment = "doc" if len(token) == 3 else "block"
        elif token.startswith("//"):
            scan.line_comment = "doc" if len(token) == 3 else "line"
        elif token == "#":
            if not text.startswith(("#include", "#import", "#["), at):
                scan.line_comment = "line"
        elif token == "--":
            if not text[line_start:at].strip() or text.startswith("-- ", at):
                scan.line_comment = "line"
        elif token in ('"""', "'''", '"', "`") or token == "'" and not _is_apostrophe(text, at):
            scan.quote, scan.quote_pos = token, at
        elif token in "([{":
            before = text[line_start:at]
            scan.brackets.append(
                _Open(token, before.strip(), head_word(before), indent_width(before), line_no))
        elif token in ")]}" and scan.brackets:
            scan.brackets.pop()
    return scan


def _is_apostrophe(text: str, i: int) -> bool:
    """`don't`, Rust lifetimes `'a`: a quote glued to a word is not a string opener."""
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] in "&<")


def _bracket_kind(opener: _Open) -> str:
    """What an unclosed bracket means, from the text just before it."""
    before = opener.before
    prev = before[-1:] or ""
    if opener.line_head in IMPORT_WORDS:
        return "import"
    if opener.line_head in ("@", "#") or before.endswith("#"):
        return "decorator"
    if opener.char == "(":
        first_paren = "(" not in before
        if opener.line_head in DEF_WORDS and first_paren:
            return "signature"
        last_word = re.split(r"[^\w#]", before)[-1]
        if last_word in ("require", "import", "include"):
            return "import"  # `local json = require("json")`, `import("x")`
        if prev and (prev.isalnum() or prev in "_)]>!?") and last_word not in CONTROL_WORDS:
            return "call_args"
        return "group"
    if opener.char == "[":
        return "group" if prev and (prev.isalnum() or prev in "_)]") else "collection"
    if not before or prev in "=,(:[" or before.endswith("return"):
        return "collection"
    return "body"


def word_flavor(word: str) -> str:
    """What kind of block a header word opens: function | control | container | other."""
    if word in DEF_WORDS:
        return "function"
    if word in CONTROL_WORDS:
        return "control"
    if word in CONTAINER_WORDS:
        return "container"
    return "other"


def classify_by_indentation(source: bytes, offset: int, language: str = "plaintext") -> SyntaxContext:
    """Context from text alone: quotes, comment markers, brackets, keywords, indentation."""
    line = cursor_line(source, offset)
    offset = line.start + len(line.prefix.encode("utf-8"))
    start = window_start(source, line.start, offset, _WINDOW_LINES)
    window = source[start:offset].decode("utf-8", "replace")
    scan = _scan_text(window)
    headers = enclosing_headers(source, line.start, line.indent)
    kind, block_indent, depth, density = _text_kind(source, line, start, window, scan, headers)
    return SyntaxContext(
        kind=ContextKind(kind),
        language=language,
        line_indent=line.indent,
        block_indent=block_indent,
        line_prefix=line.prefix,
        line_suffix=line.suffix,
        at_line_start=line.at_line_start,
        node_type="text",
        control_depth=depth,
        op_density=density,
    )


def _text_kind(
    source: bytes, line: CursorLine, window_offset: int, window: str, scan: _TextScan, headers: list[Header]
) -> tuple[str, int, int, float]:
    """(kind, block_indent, control_depth, op_density), in the same order of precedence as
    the tree classifier: comment, import, decorator, string, bracket, signature, body."""
    window_lines = window.split("\n")
    cursor_line_no = len(window_lines) - 1
    block_indent = _block_indent(source, line, cursor_line_no, scan, headers)
    word = head_word(line.prefix)
    if scan.comment is not None:
        return ("docstring" if scan.comment == "doc" else "comment"), block_indent, 0, 0.0
    if word in IMPORT_WORDS or any(_bracket_kind(o) == "import" for o in scan.brackets):
        return "import", block_indent, 0, 0.0
    if word in ("@", "#") or line.prefix.lstrip().startswith("#["):
        return "decorator", block_indent, 0, 0.0
    if scan.quote is not None:
        return _text_string_kind(source, window_offset, window, scan), block_indent, 0, 0.0
    for opener in reversed(scan.brackets):
        kind = _bracket_kind(opener)
        if kind == "body":
            break
        if kind != "group":
            return kind, block_indent, 0, 0.0
    if word in DEF_WORDS and not line.prefix.rstrip().endswith((":", "{")):
        return "signature", block_indent, 0, 0.0

    # Enclosing blocks outermost first: indentation headers, then `{` opened in the window.
    flavors = [word_flavor(h.word) for h in reversed(headers)]
    flavors += [word_flavor(o.line_head) for o in scan.brackets if _bracket_kind(o) == "body"]
    if flavors and flavors[-1] == "container":
        return "simple_body", block_indent, 0, 0.0
    if not flavors and line.at_line_start:
        return "unknown", block_indent, 0, 0.0
    function_at = max((i for i, f in enumerate(flavors) if f == "function"), default=-1)
    depth = sum(1 for f in flavors[function_at + 1 :] if f == "control")
    density = operator_density(window_lines[-DENSITY_LINES:])
    kind = "complex_body" if is_complex(depth, density) else "simple_body"
    return kind, block_indent, depth, density


def _block_indent(
    source: bytes, line: CursorLine, cursor_line_no: int, scan: _TextScan, headers: list[Header]
) -> int:
    """Indentation of the nearest line above the cursor that opens what it sits in: an
    indentation header or an unclosed bracket; -1 at top level."""
    best_distance, best_indent = None, -1
    if headers:
        best_distance = source.count(b"\n", headers[0].line_start, line.start)
        best_indent = headers[0].indent
    for opener in reversed(scan.brackets):
        distance = cursor_line_no - opener.line_no
        if distance == 0 or _bracket_kind(opener) == "group":
            continue
        if best_distance is None or distance <= best_distance:
            best_indent = opener.line_indent
        break
    return best_indent


def _text_string_kind(source: bytes, window_offset: int, window: str, scan: _TextScan) -> str:
    """A triple-quoted string in docstring position is a docstring; any other is a string."""
    if scan.quote not in ('"""', "'''"):
        return "string"
    opener = window_offset + len(window[: scan.quote_pos].encode("utf-8"))
    return "docstring" if is_docstring_position(source, opener) else "string"
