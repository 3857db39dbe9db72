"""Other files in front of the FIM prompt, in Qwen2.5-Coder's repository-level layout:

    <|repo_name|>{name}\\n<|file_sep|>{path}\\n{chunks of that file}\\n ... <|file_sep|>{current path}\\n
    <|fim_prefix|>...   (the current file's FIM prompt, unchanged)

The model was trained to stop on `<|file_sep|>`; the runtime stops on every special token.

KV-cache reuse decides the shape: the chunks come first, in a stable order, and a document
keeps its plan (the chunks and their token ids) while the cursor stays in the same block of
`BLOCK_LINES` lines and the same other files are open, so typing still only appends to the
prompt and a keystroke prefills a few tokens. Chunk texts are snapshots: editing another file
changes this file's prompt only when its plan is renewed. The plan keeps its chunks, not only
their ids: a prompt for another codec (a remote server's text, where every request has a fresh
piece table) lays out the same chunks again, so local and remote prompts carry the same text.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Callable, Sequence
from urllib.parse import unquote, urlparse

from lsp_server.context.snippets import Chunk, SourceFile, package_chunks, pick_chunks

BLOCK_LINES = 32
QUERY_PREFIX_LINES = 40  # the code around the cursor that chunks must resemble
QUERY_SUFFIX_LINES = 10
# Comment lines between two chunks of one file, so they do not read as adjacent code.
_GAP = {"python": "# ...\n"}
_DEFAULT_GAP = "// ...\n"

Encode = Callable[[str], list[int]]


@dataclass(frozen=True)
class RepoTokens:
    repo_name: int
    file_sep: int


@dataclass(frozen=True)
class Plan:
    key: tuple
    chunks: tuple[Chunk, ...]
    ids: tuple[int, ...]  # everything before the FIM prompt; () when there are no chunks
    encode: Encode | None = None  # what `ids` were encoded with


def uri_path(uri: str) -> str:
    """The POSIX path of a file URI (other schemes: the URI's path part)."""
    return unquote(urlparse(uri).path) or uri


def display_path(path: str, roots: Sequence[str]) -> str:
    """`path` relative to the workspace folder holding it, else its last two parts."""
    for root in roots:
        root = root.rstrip("/")
        if root and path.startswith(root + "/"):
            return path[len(root) + 1:]
    return "/".join(path.split("/")[-2:])


def repo_name(path: str, roots: Sequence[str]) -> str:
    for root in roots:
        root = root.rstrip("/")
        if root and path.startswith(root + "/"):
            return posixpath.basename(root)
    return posixpath.basename(posixpath.dirname(path)) or "repo"


def query_text(prefix: str, suffix: str) -> str:
    before = prefix.splitlines()[-QUERY_PREFIX_LINES:]
    after = suffix.splitlines()[:QUERY_SUFFIX_LINES]
    return "\n".join(before + after)


def layout_ids(chunks: Sequence[Chunk], current_path: str | None, roots: Sequence[str],
               language: str, encode: Encode, tokens: RepoTokens) -> list[int]:
    """The repository-level header: repo name, each chunk's file, the current file's path
    (None: the header alone, which every file's prompt with these chunks starts with)."""
    ids = [tokens.repo_name, *encode(repo_name(current_path or chunks[0].path, roots) + "\n")]
    gap = _GAP.get(language, _DEFAULT_GAP)
    by_file: dict[str, list[str]] = {}
    for chunk in chunks:  # already in (path, line) order
        text = chunk.text if chunk.text.endswith("\n") else chunk.text + "\n"
        by_file.setdefault(chunk.path, []).append(text)
    for path, texts in by_file.items():
        ids += [tokens.file_sep, *encode(display_path(path, roots) + "\n" + gap.join(texts))]
    if current_path is not None:
        ids += [tokens.file_sep, *encode(display_path(current_path, roots) + "\n")]
    return ids


def package_head_ids(others: Sequence[SourceFile], roots: Sequence[str], language: str,
                     budget_tokens: int, encode: Encode, tokens: RepoTokens | None) -> list[int]:
    """The head a file opened next gets with `extraSources` package, where `others` are the
    documents open now: what a warm prefills before the user opens that file."""
    if tokens is None or budget_tokens <= 0:
        return []
    chunks = package_chunks(others, budget_tokens, lambda text: len(encode(text)))
    return layout_ids(chunks, None, roots, language, encode, tokens) if chunks else []


class CrossFileContext:
    """Per document, the plan its prompts start with (see the module docstring)."""

    def __init__(self) -> None:
        self._plans: dict[str, Plan] = {}

    def prefix_ids(
        self, uri: str, current: SourceFile, cursor_line: int, prefix: str, suffix: str,
        others: Sequence[SourceFile], roots: Sequence[str], budget_tokens: int,
        encode: Encode, tokens: RepoTokens | None, sources: str = "all",
    ) -> Plan:
        """`sources`: all, definitions or similar (see snippets.pick_chunks), or package:
        the outlines of the open files, whatever the cursor (snippets.package_chunks)."""
        if tokens is None or budget_tokens <= 0:
            return Plan((), (), ())
        # Opening or closing another file re-plans once; edits to them wait for the next plan.
        key = (cursor_line // BLOCK_LINES, budget_tokens, sources, frozenset(o.path for o in others))
        plan = self._plans.get(uri)
        if sources == "package":
            key = (budget_tokens, sources)
        if plan is not None and plan.key == key and self._still_open(plan, others):
            if plan.encode == encode:
                return plan
            chunks = list(plan.chunks)  # the same chunks, encoded for this codec
        elif sources == "package":
            chunks = package_chunks(others, budget_tokens, lambda text: len(encode(text)))
        else:
            kinds = ("definitions", "similar") if sources == "all" else (sources,)
            chunks = pick_chunks(current, query_text(prefix, suffix), others, budget_tokens,
                                 lambda text: len(encode(text)), kinds)
        ids = layout_ids(chunks, current.path, roots, current.language, encode, tokens) if chunks else []
        plan = Plan(key, tuple(chunks), tuple(ids), encode)
        self._plans[uri] = plan
        return plan

    @staticmethod
    def _still_open(plan: Plan, others: Sequence[SourceFile]) -> bool:
        """A package plan stays while its files are open (a file opened since joins at its
        next plan, so a switch back finds its prompt as it was); an empty one waits for none."""
        if plan.key[-1] != "package":
            return True
        paths = {o.path for o in others}
        return bool(plan.chunks or not others) and all(c.path in paths for c in plan.chunks)

    def forget(self, uri: str) -> None:
        self._plans.pop(uri, None)
