"""Where is the cursor? `classify(tree, source, offset, language_id) -> SyntaxContext`.

Mid-typing buffers are the normal case, so two views are merged into one list of scopes
(brackets, bodies, strings, comments) that enclose the cursor:

1. the tree: ancestors of the node at the cursor that really enclose it;
2. the tokens: a pass over the leaves of the last few lines before the cursor with a bracket
   / quote / comment stack, which still sees `foo(a, ` or `"abc` when the parser wrapped
   them in an ERROR node; for Python, also the indentation headers above the cursor line
   (a blank line after a block is outside the block's node).

The innermost scope decides the kind; imports and decorators claim their whole statement.
Bodies: a class/struct/enum/interface body is simple_body; any other body is complex_body
when `indent.is_complex` says so (enclosing if/for/while/match/switch inside the function,
plus binary operators per line over the last 4 lines, reaching 2), else simple_body.

Cost is bounded by construction: the ancestors of one node, the leaves of at most
`_WIDE_WINDOW` lines (4 KiB), and one walk up the indentation. Never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node, Tree

from lsp_server.syntax import indent as text
from lsp_server.syntax.languages import canonical_language
from lsp_server.syntax.types import ContextKind, SyntaxContext


# ---------------------------------------------------------------------------------------
# Node types, across the nine grammars.

_ARGS = frozenset({"argument_list", "arguments"})
_PARAMS = frozenset(
    {"parameters", "formal_parameters", "parameter_list", "lambda_parameters", "closure_parameters",
     "type_parameters", "template_parameter_list"}
)
_COLLECTIONS = frozenset(
    {"list", "dictionary", "set", "tuple", "list_comprehension", "dictionary_comprehension",
     "set_comprehension", "array", "object", "array_expression", "tuple_expression",
     "field_initializer_list", "initializer_list", "literal_value", "array_initializer",
     "element_value_array_initializer"}
)
_IMPORTS = frozenset(
    {"import_statement", "import_from_statement", "future_import_statement", "import_declaration",
     "use_declaration", "preproc_include", "using_declaration", "extern_crate_declaration",
     "package_clause", "package_declaration", "named_imports", "import_spec_list", "use_list"}
)
_DECORATORS = frozenset(
    {"decorator", "annotation", "marker_annotation", "attribute_item", "inner_attribute_item",
     "attribute_declaration"}
)
_STRINGS = frozenset(
    {"string", "template_string", "string_literal", "interpreted_string_literal",
     "raw_string_literal", "char_literal", "character_literal", "text_block", "jsx_text"}
)
_COMMENTS = frozenset({"comment", "line_comment", "block_comment"})
_BODIES = frozenset(
    {"block", "statement_block", "compound_statement", "class_body", "declaration_list",
     "field_declaration_list", "enum_body", "enum_variant_list", "enumerator_list",
     "interface_body", "object_type", "switch_block", "switch_body", "match_block",
     "constructor_body", "expression_switch_statement", "type_switch_statement",
     "select_statement"}
)
# Bodies that list declarations (fields, variants, members): boilerplate by nature.
_CONTAINER_BODIES = frozenset(
    {"class_body", "declaration_list", "field_declaration_list", "enum_body",
     "enum_variant_list", "enumerator_list", "interface_body", "object_type"}
)
_FUNCTIONS = frozenset(
    {"function_definition", "function_declaration", "method_definition", "method_declaration",
     "constructor_declaration", "arrow_function", "function_expression", "function",
     "generator_function_declaration", "function_item", "closure_expression", "func_literal",
     "lambda_expression", "lambda"}
)
_CONTROL = frozenset(
    {"if_statement", "elif_clause", "else_clause", "for_statement", "for_in_statement",
     "enhanced_for_statement", "for_range_loop", "while_statement", "do_statement",
     "switch_statement", "switch_expression", "match_statement", "case_clause",
     "if_expression", "for_expression", "while_expression", "loop_expression",
     "match_expression", "match_arm", "expression_switch_statement", "type_switch_statement",
     "select_statement", "switch_case", "switch_default", "expression_case", "default_case"}
)
_CLASSES = frozenset({"class_definition", "class_declaration", "struct_item", "impl_item", "trait_item"})
_CLOSERS = frozenset({")", "]", "}", '"', "'", "`", '"""', "'''", "string_end", "*/"})
# Scopes that need no closing token to be trusted: statements, strings, comments.
_OPEN_ENDED = frozenset({"import", "decorator", "string", "comment"})
_QUOTES = frozenset({'"', "'", "`", '"""', "'''"})
_COLLECTION_PREV = frozenset({"=", ":=", ",", "(", "[", ":", "return", "?", "||", "&&", "??", "yield"})
_TYPE_LEAVES = frozenset(
    {"primitive_type", "type_identifier", "integral_type", "floating_point_type", "void_type",
     "boolean_type", "sized_type_specifier", "predefined_type", "auto"}
)
_BINARY = frozenset(
    {"+", "-", "*", "/", "%", "**", "//", "<<", ">>", "&", "|", "^", "&&", "||", "==", "!=",
     "===", "!==", "<", ">", "<=", ">=", "and", "or", "??", "&^"}
)
_AUGMENTED = frozenset({"+=", "-=", "*=", "/=", "%=", "**=", "//=", "<<=", ">>=", "&=", "|=", "^="})

# Lines of leaves scanned before the cursor when the tree is broken near it.
_WIDE_WINDOW = 30
# A line's head word is found in its first bytes; never decode a whole minified line for it.
_HEAD_BYTES = 256
# Leaves that may open a scope (besides comments and strings, matched by name).
_SCOPE_LEAVES = frozenset({"(", "[", "{", "*", "jsx_text"} | _QUOTES)


@dataclass
class _Scope:
    """Something the cursor sits inside. `start` orders scopes: larger is more inner."""

    role: str  # args | params | collection | bare | group | import | decorator | body | string | comment
    start: int  # byte offset of its opener (a Python block: its header's first byte)
    line_start: int  # start of the line it opens on (its header line)
    flavor: str = "other"  # bodies: function | control | container | other
    doc: bool = False  # strings and comments: documentation
    commas: bool = False  # brackets: a comma was seen at its depth
    quote: str = ""  # strings opened by a token: the closing delimiter to wait for


def classify(tree: Tree | None, source: bytes, offset: int, language_id: str) -> SyntaxContext:
    language = canonical_language(language_id)
    if tree is None:
        return text.classify_by_indentation(source, offset, language)
    offset = max(0, min(offset, len(source)))
    line = text.cursor_line(source, offset)
    root = tree.root_node
    scopes = {s.start: s for s in _token_scopes(root, source, offset, line, language)}
    ancestors = _ancestor_scopes(root, source, offset, language)
    # Inside a string or comment the tree knows is closed, indented prose lines are not headers.
    prose_from = max((s.start for s in ancestors if s.role in ("string", "comment")), default=len(source))
    if language == "python":
        for header in text.enclosing_headers(source, line.start, line.indent):
            if header.start < prose_from:
                scopes[header.start] = _Scope("body", header.start, header.line_start, text.word_flavor(header.word))
    for scope in ancestors:
        scopes[scope.start] = scope  # the tree knows node types; it wins over token guesses
    ordered = sorted(scopes.values(), key=lambda s: s.start)
    kind, depth, density = _decide(ordered, root, source, offset, line, language)
    named = root.named_descendant_for_byte_range(max(offset - 1, 0), offset)
    return SyntaxContext(
        kind=kind,
        language=language,
        line_indent=line.indent,
        block_indent=_block_indent(ordered, source, line),
        line_prefix=line.prefix,
        line_suffix=line.suffix,
        at_line_start=line.at_line_start,
        node_type=named.type if named is not None else root.type,
        control_depth=depth,
        op_density=round(density, 2),
    )


# ---------------------------------------------------------------------------------------
# View 1: the tree's ancestors.


def _ancestor_scopes(root: Node, source: bytes, offset: int, language: str) -> list[_Scope]:
    scopes = []
    node: Node | None = root.descendant_for_byte_range(max(offset - 1, 0), offset)
    while node is not None:
        if _encloses(node, source, offset):
            scope = _scope_of(node, source, language)
            if scope is not None and (scope.role in _OPEN_ENDED or _closed(node) or _is_python_block(node)):
                scopes.append(scope)
        node = node.parent
    return scopes


def _encloses(node: Node, source: bytes, offset: int) -> bool:
    """The cursor is inside `node`: after its start, and before its closing delimiter (a node
    without one, like a Python block or a line comment, extends to its end)."""
    if not node.start_byte < offset <= node.end_byte:
        return False
    if offset < node.end_byte:
        return True
    if node.child_count == 0:  # a leaf: only line comments and JSX text run up to the cursor
        if node.type in _COMMENTS or "comment" in node.type:
            return not source[node.start_byte : node.end_byte].endswith(b"*/")
        return node.type == "jsx_text"
    last = node.child(node.child_count - 1)
    return last.is_missing or last.type not in _CLOSERS


def _closed(node: Node) -> bool:
    """Ends with a real closing token. A node whose closer is missing is error recovery's
    guess (an unclosed `{` may come back as an object), so the token view decides instead."""
    last = node.child(node.child_count - 1) if node.child_count else None
    return last is not None and not last.is_missing and last.type in _CLOSERS


def _is_python_block(node: Node) -> bool:
    return node.type == "block" and node.child_count > 0 and node.child(0).type != "{"


def _scope_of(node: Node, source: bytes, language: str) -> _Scope | None:
    kind = node.type
    role = None
    if kind in _STRINGS:
        return _Scope("string", node.start_byte, _line_start(source, node.start_byte),
                      doc=language == "python" and _is_python_docstring(node))
    if kind in _COMMENTS:
        return _Scope("comment", node.start_byte, _line_start(source, node.start_byte),
                      doc=_is_doc_comment(source[node.start_byte : node.start_byte + 3]))
    if kind in _IMPORTS:
        role = "import"
    elif kind in _DECORATORS:
        role = "decorator"
    elif kind in _ARGS:
        role = "args"
    elif kind in _PARAMS:
        role = "params"
    elif kind in _COLLECTIONS:
        role = "collection"
    elif kind == "token_tree":  # Rust macro call: println!(..) is a call, vec![..] a list
        role = "args" if source[node.start_byte : node.start_byte + 1] == b"(" else "collection"
    elif kind in _BODIES:
        start = node.start_byte
        if kind == "block" and language == "python" and node.parent is not None:
            start = node.parent.start_byte  # a Python block starts after its header line
        return _Scope("body", start, _line_start(source, start), _node_flavor(node))
    if role is None:
        return None
    return _Scope(role, node.start_byte, _line_start(source, node.start_byte))


def _node_flavor(body: Node) -> str:
    parent = body.parent.type if body.parent is not None else ""
    if body.type in _CONTAINER_BODIES or parent in _CLASSES:
        return "container"
    if body.type in _CONTROL or parent in _CONTROL:
        return "control"
    if parent in _FUNCTIONS:
        return "function"
    return "other"


def _is_python_docstring(string: Node) -> bool:
    statement = string.parent
    if statement is None or statement.type != "expression_statement":
        return False
    if statement.prev_named_sibling is not None or statement.parent is None:
        return False
    container = statement.parent
    if container.type == "module":
        return True
    owner = container.parent
    return container.type == "block" and owner is not None and owner.type in (
        "function_definition", "class_definition")


# ---------------------------------------------------------------------------------------
# View 2: the tokens before the cursor.


def _token_scopes(root: Node, source: bytes, offset: int, line: text.CursorLine, language: str) -> list[_Scope]:
    """Scan the leaves of the last lines before the cursor with a stack of what is open. Where
    the tree is sound near the cursor its ancestors already know every open scope, so a few
    lines do; where it is broken, look further back for the unclosed opener."""
    window_start = text.window_start(source, line.start, offset, text.DENSITY_LINES - 1)
    if _broken_near(root, window_start, offset):
        window_start = text.window_start(source, line.start, offset, _WIDE_WINDOW)
    stack: list[_Scope] = []
    line_leaves: list[Node] = []  # significant leaves on the current line, before this one
    line_end = -1
    gap_start = window_start
    for leaf in _leaves(root, window_start, offset):
        kind, start = leaf.type, leaf.start_byte
        if start > gap_start:
            _open_skipped_quote(source, gap_start, start, stack)
        gap_start = max(gap_start, leaf.end_byte)
        top = stack[-1] if stack else None
        if top is not None and top.role == "string" and top.quote:
            if _closes_string(leaf, top.quote, source):
                stack.pop()
            continue
        if top is not None and top.role == "comment":
            if kind == "/" and source[start - 1 : start] == b"*":
                stack.pop()
            continue
        if start >= line_end:
            line_end = _line_end(source, start)
            line_leaves = []
        if kind in (")", "]", "}"):
            _pop_bracket(stack)
        elif kind == ",":
            if stack:
                stack[-1].commas = True
        elif kind in _SCOPE_LEAVES or "comment" in kind or "string" in kind:
            scope = _leaf_scope(leaf, source, offset, stack, line_leaves, language)
            if scope is not None:
                stack.append(scope)
        if kind not in _COMMENTS:
            line_leaves.append(leaf)
    if offset > gap_start:
        _open_skipped_quote(source, gap_start, offset, stack)
    return stack


def _broken_near(root: Node, start: int, offset: int) -> bool:
    """An ERROR or MISSING node in, or around, the lines just before the cursor."""
    node: Node | None = root.descendant_for_byte_range(start, offset)
    if node is None or node.has_error:
        return node is not None
    while node is not None:
        if node.is_error or node.is_missing:
            return True
        node = node.parent
    return False


def _open_skipped_quote(source: bytes, start: int, end: int, stack: list[_Scope]) -> None:
    """Error recovery can skip bytes that are in no leaf (Rust's unterminated `r#"`); an
    odd number of quotes among them opens a string."""
    if end <= start or (stack and stack[-1].role in ("string", "comment")):
        return
    gap = source[start:end]
    if not gap.strip():
        return
    for quote in (b'"', b"`"):
        if gap.count(quote) % 2:
            position = start + gap.rindex(quote)
            stack.append(_Scope("string", position, _line_start(source, position), quote=quote.decode()))
            return


def _leaves(root: Node, start: int, end: int) -> list[Node]:
    """Leaves overlapping [start, end) in document order (comments count as leaves). A tree
    cursor jumps straight to the first child reaching `start`, so wide nodes (a module with
    thousands of statements) cost nothing for the children outside the range."""
    out: list[Node] = []
    cursor = root.walk()
    if root.child_count == 0:
        return [root] if root.start_byte < end and root.end_byte > start else out
    if cursor.goto_first_child_for_byte(start) is None:
        return out
    while True:
        node = cursor.node
        if node.start_byte >= end:
            return out  # everything after this is further right
        if node.child_count == 0 or node.type in _COMMENTS:
            if not node.is_missing and node.end_byte > start:
                out.append(node)
        elif cursor.goto_first_child_for_byte(start) is not None:
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return out


def _leaf_scope(
    leaf: Node, source: bytes, offset: int, stack: list[_Scope], line_leaves: list[Node], language: str
) -> _Scope | None:
    kind = leaf.type
    start = leaf.start_byte
    if kind in _COMMENTS or "comment" in kind:
        if _encloses(leaf, source, offset):
            return _Scope("comment", start, _line_start(source, start),
                          doc=_is_doc_comment(source[start : start + 3]))
        return None
    if _is_quote(leaf):
        opener = source[start : leaf.end_byte].decode("utf-8", "replace").lstrip("rRbBuUfF")
        line_start = _line_start(source, start)
        doc = language == "python" and len(opener) == 3 and text.is_docstring_position(source, start)
        return _Scope("string", start, line_start, doc=doc, quote=opener or '"')
    if ("string" in kind and ("content" in kind or "fragment" in kind)) or kind == "jsx_text":
        if leaf.start_byte < offset <= leaf.end_byte and not any(s.role == "string" for s in stack):
            # Opened above the window: the string node still knows whether it is a docstring.
            string = leaf.parent
            doc = language == "python" and string is not None and string.type in _STRINGS and _is_python_docstring(string)
            return _Scope("string", start, _line_start(source, start), doc=doc)
        return None
    if kind == "*" and line_leaves and line_leaves[-1].type == "/" and line_leaves[-1].end_byte == start:
        # `/*` lexed as two operators: an unterminated block comment in an ERROR node.
        return _Scope("comment", start - 1, _line_start(source, start),
                      doc=source[start + 1 : start + 2] in (b"*", b"!"))
    if kind in ("(", "[", "{"):
        line_start = _line_start(source, start)
        head = text.head_word(source[line_start : min(start, line_start + _HEAD_BYTES)].decode("utf-8", "replace"))
        role, flavor = _bracket_role(leaf, source, offset, line_start, head, stack, line_leaves, language)
        return _Scope(role, start, line_start, flavor)
    return None


def _bracket_role(
    leaf: Node,
    source: bytes,
    offset: int,
    line_start: int,
    head: str,
    stack: list[_Scope],
    line_leaves: list[Node],
    language: str,
) -> tuple[str, str]:
    """What an open bracket means: from its parent node when the tree knows, else from the
    tokens before it on its line."""
    parent = leaf.parent
    trusted = parent is not None and parent.end_byte > offset and _closed(parent)
    scope = _scope_of(parent, source, language) if trusted else None
    if head in text.IMPORT_WORDS:
        return "import", "other"
    if scope is not None and scope.role not in ("string", "comment", "body"):
        return scope.role, "other"
    if scope is not None and scope.role == "body":
        return "body", _node_flavor(parent)
    prev = line_leaves[-1] if line_leaves else None
    prev_type = prev.type if prev is not None else ""
    if head in ("@", "#") or prev_type == "#":
        return "decorator", "other"
    if leaf.type != "(" and stack and stack[-1].role == "params":
        return "params", "other"  # a destructuring pattern: `function f({ a, b`
    if leaf.type == "(":
        nested = any(s.start >= line_start for s in stack)  # inside a bracket opened on this line
        if head in text.DEF_WORDS and not nested:
            return "params", "other"
        if prev is not None and _is_callee(prev):
            in_container = bool(stack) and stack[-1].role == "body" and stack[-1].flavor == "container"
            if _declares(line_leaves) or (in_container and len(line_leaves) == 1):
                return "params", "other"
            return "args", "other"
        return "bare", "other"
    if leaf.type == "[":
        if prev is not None and prev_type == "!":
            return "collection", "other"
        return ("group" if prev is not None and (_is_name(prev) or prev_type in (")", "]")) else "collection"), "other"
    # `{`
    if language == "python" or prev is None and head == "" or prev_type in _COLLECTION_PREV:
        return "collection", "other"
    declaration_head = head in text.CONTAINER_WORDS or head in text.DEF_WORDS or head in text.CONTROL_WORDS
    assigned = any(earlier.type in ("=", ":=") for earlier in line_leaves)
    if not declaration_head and (prev_type == "type_identifier" or assigned and _is_name(prev)):
        return "collection", "other"  # Go `[]int{`, `p := Point{`, Rust `let p = Point {`
    flavor = text.word_flavor(head)
    if flavor == "other" and prev_type in (")", "=>"):
        flavor = "function"
    return "body", flavor


def _is_name(leaf: Node) -> bool:
    return leaf.type.endswith("identifier")


def _is_callee(leaf: Node) -> bool:
    return _is_name(leaf) or leaf.type in (")", "]", ">", "!", "?.", "print", "exec")


def _declares(line_leaves: list[Node]) -> bool:
    """`int add(`, `String name(`, `T Foo::bar(`, `char *dup(`: a name after a type starts a
    declaration, not a call."""
    if not line_leaves or not _is_name(line_leaves[-1]):
        return False
    i = len(line_leaves) - 2
    while i >= 0:
        if line_leaves[i].type == "::":
            i -= 2  # `Foo::bar`
        elif line_leaves[i].type in ("*", "&", "&&"):
            i -= 1  # `char *dup`
        else:
            break
    if i < 0:
        return False
    before = line_leaves[i]
    parent = before.parent.type if before.parent is not None else ""
    if before.type == ">":
        return "type" in parent or "template" in parent  # `List<String> name(`
    # A type leaf (`int`, `String`), or a keyword inside a type node (Java's `int`).
    return before.type in _TYPE_LEAVES or (before.type.isalpha() and not before.is_named and parent.endswith("_type"))


def _is_quote(leaf: Node) -> bool:
    if leaf.type == "string_start":
        return True
    if leaf.is_named or leaf.type not in _QUOTES:
        return False
    parent = leaf.parent.type if leaf.parent is not None else ""
    return parent not in ("lifetime", "label")


def _closes_string(leaf: Node, quote: str, source: bytes) -> bool:
    if leaf.type == "string_end":
        return True
    return not leaf.is_named and source[leaf.start_byte : leaf.end_byte].decode("utf-8", "replace") == quote


def _pop_bracket(stack: list[_Scope]) -> None:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i].role not in ("string", "comment"):
            del stack[i]
            return


def _is_doc_comment(opening: bytes) -> bool:
    return opening in (b"/**", b"///", b"//!", b"/*!")


def _line_start(source: bytes, pos: int) -> int:
    return source.rfind(b"\n", 0, pos) + 1


def _line_end(source: bytes, pos: int) -> int:
    end = source.find(b"\n", pos)
    return len(source) if end < 0 else end


# ---------------------------------------------------------------------------------------
# Deciding.


def _decide(
    scopes: list[_Scope], root: Node, source: bytes, offset: int, line: text.CursorLine, language: str
) -> tuple[ContextKind, int, float]:
    """The innermost scope wins, with imports and decorators taking the whole statement."""
    bodies = [i for i, s in enumerate(scopes) if s.role == "body"]
    statement = scopes[bodies[-1] + 1 :] if bodies else scopes  # scopes inside the innermost body
    head = text.head_word(line.prefix)
    innermost = statement[-1] if statement else None
    if innermost is not None and innermost.role == "comment":
        return (ContextKind.DOCSTRING if innermost.doc else ContextKind.COMMENT), 0, 0.0
    if head in text.IMPORT_WORDS or any(s.role == "import" for s in statement):
        return ContextKind.IMPORT, 0, 0.0
    if head in ("@", "#") or any(s.role == "decorator" for s in statement):
        return ContextKind.DECORATOR, 0, 0.0
    for scope in reversed(statement):
        if scope.role == "string":
            return (ContextKind.DOCSTRING if scope.doc else ContextKind.STRING), 0, 0.0
        kind = _bracket_kind(scope, language)
        if kind is not None:
            return kind, 0, 0.0
    if head in text.DEF_WORDS and not _header_done(line.prefix, language):
        return ContextKind.SIGNATURE, 0, 0.0

    body_scopes = [scopes[i] for i in bodies]
    if body_scopes and body_scopes[-1].flavor == "container":
        return ContextKind.SIMPLE_BODY, 0, 0.0
    if not body_scopes and line.at_line_start:
        return ContextKind.UNKNOWN, 0, 0.0
    last_function = max((i for i, s in enumerate(body_scopes) if s.flavor == "function"), default=-1)
    depth = sum(1 for s in body_scopes[last_function + 1 :] if s.flavor == "control")
    density = _operator_density(root, source, offset, line)
    complex_ = text.is_complex(depth, density)
    return (ContextKind.COMPLEX_BODY if complex_ else ContextKind.SIMPLE_BODY), depth, density


def _bracket_kind(scope: _Scope, language: str) -> ContextKind | None:
    if scope.role == "args":
        return ContextKind.CALL_ARGS
    if scope.role == "params":
        return ContextKind.SIGNATURE
    if scope.role == "collection":
        return ContextKind.COLLECTION
    if scope.role == "bare" and scope.commas:
        # `(a, b` with no callee: a tuple in Python, arrow-function parameters in JS/TS.
        if language == "python":
            return ContextKind.COLLECTION
        if language in ("javascript", "javascriptreact", "typescript", "typescriptreact"):
            return ContextKind.SIGNATURE
    return None


def _header_done(prefix: str, language: str) -> bool:
    """The def line already opened its body (`:` in Python, `{` elsewhere)."""
    stripped = prefix.rstrip()
    return stripped.endswith(":") if language == "python" else "{" in stripped


def _operator_density(root: Node, source: bytes, offset: int, line: text.CursorLine) -> float:
    start = text.window_start(source, line.start, offset, text.DENSITY_LINES - 1)
    lines = sum(1 for chunk in source[start:offset].split(b"\n") if chunk.strip())
    if not lines:
        return 0.0
    operators = sum(1 for leaf in _leaves(root, start, offset) if _is_operator(leaf))
    return operators / lines


def _is_operator(leaf: Node) -> bool:
    if leaf.is_named:
        return False
    if leaf.type in _AUGMENTED:
        return True
    if leaf.type not in _BINARY or leaf.parent is None:
        return False
    parent = leaf.parent.type
    return parent == "ERROR" or any(word in parent for word in ("binary", "comparison", "boolean"))


def _block_indent(scopes: list[_Scope], source: bytes, line: text.CursorLine) -> int:
    """Indentation of the header line of the innermost block or bracket opened on an earlier
    line (strings and comments are not blocks); -1 at top level."""
    for scope in reversed(scopes):
        if scope.role in ("string", "comment") or scope.line_start >= line.start:
            continue
        return text.line_indent_at(source, scope.line_start)
    return -1
