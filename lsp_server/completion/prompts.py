"""A completion's prompt: the cursor's syntax context -> policy -> the FIM prompt in the
backend's codec, other files' chunks in front of it, and per document where its prompts'
window starts (context/prompt.py's anchor), so typing grows a cached window at its end."""

from __future__ import annotations

import functools
import itertools
import logging
from dataclasses import dataclass, replace
from typing import Any, Callable

from lsp_server.backends.base import Backend, BackendRequest, PromptCodec
from lsp_server.completion.documents import Document, DocumentStore
from lsp_server.config import Config
from lsp_server.context.cross_file import CrossFileContext, package_head_ids, uri_path
from lsp_server.context.prompt import ContextBudget, build_fim_prompt, first_window_tokens
from lsp_server.context.snippets import SourceFile
from lsp_server.context.workspace_files import WorkspaceFiles
from lsp_server.engine.stopping import stop_strings
from lsp_server.engine.types import CompletionRequest
from lsp_server.syntax.context import classify
from lsp_server.syntax.languages import make_parser
from lsp_server.syntax.policy import PolicyOverrides, describe, policy_for
from lsp_server.syntax.types import SyntaxContext

log = logging.getLogger(__name__)
_ids = itertools.count(1)


@dataclass(frozen=True)
class Cursor:
    uri: str
    version: int
    line: int
    character: int


@dataclass(frozen=True)
class Prepared:
    request: BackendRequest
    context: SyntaxContext
    suffix: str  # the document after the cursor: what a completion must not repeat
    window_line: int | None = None  # where the prefix window starts (prompt.FimPrompt)
    window_tokens: int = 0  # and the tokens it holds


@functools.lru_cache(maxsize=None)
def parse_function(language_id: str) -> Callable[[bytes], Any] | None:
    """tree-sitter's parse for a language (None without a grammar), for files read from disk."""
    parser = make_parser(language_id)
    return parser.parse if parser is not None else None


def source_file(doc: Document) -> SourceFile:
    return SourceFile(uri_path(doc.uri), doc.text, doc.tree, doc.language_id)


def package_head(config: Config) -> bool:
    """Whether other files' context is the package head (the same for every file opened next)."""
    window = config.contextWindow
    return window.extraSources == "package" and window.extraTokens > 0


def prepare(doc: Document, cursor: Cursor, encoding: str, config: Config, codec: PromptCodec,
            head: Callable[[str, str], tuple[int, ...]] = lambda prefix, suffix: (),
            anchor: tuple[int, int] | None = None) -> Prepared:
    """`head(prefix, suffix)`: token ids in front of the FIM prompt (other files' chunks);
    `anchor`: where the document's previous prompt started its window and the tokens it
    held (prompt.py's `anchor_line`, `anchor_tokens`)."""
    prefix, suffix = doc.prefix_suffix(cursor.line, cursor.character, encoding)
    offset = doc.cursor_byte_offset(cursor.line, cursor.character, encoding)
    context = classify(doc.tree, doc.source, offset, doc.language_id)
    spec = config.speculation
    overrides = PolicyOverrides(
        mode=spec.mode, k=spec.k or None, k_max=spec.kMax or None,
        max_new_tokens=config.maxNewTokens or None)
    policy = replace(policy_for(context, overrides), prompt_lookup=spec.promptLookup)
    window = config.contextWindow
    budget = ContextBudget(window.prefixTokens, window.suffixTokens,
                           first_prefix_tokens=window.firstPrefixTokens)
    request_id = f"{cursor.uri}#{next(_ids)}"
    windows: list[tuple[int | None, int]] = []

    def build(codec: PromptCodec) -> BackendRequest:
        prompt = build_fim_prompt(prefix, suffix, codec.encode, codec.fim, budget, window.fimMode,
                                  *(anchor or (None, None)))
        windows.append((prompt.window_line, prompt.prefix_tokens))
        others = head(prefix, suffix)
        ids = (*others, *prompt.ids)
        text = plain = cut = ""
        if codec.render is not None:
            # A server that takes text cannot be made to spell out a healed token. Healed
            # whitespace (the cursor line's indentation, a space after `return`) stays cut
            # and the server's output must start with it: written back, it ends the prompt
            # in a whitespace token no word follows in training, and the server answered
            # nothing at 8 of 12 block spots (a probe, llama-server, the quality spots); cut,
            # at none. Other healed text (a word's start) goes back into the prompt.
            # `plain`: the same prompt without other files, for a server that refuses the
            # repository-level one.
            cut = prompt.heal if not prompt.heal.strip() else ""
            back = "" if cut else prompt.heal
            text = codec.render(list(ids)) + back
            plain = codec.render(list(prompt.ids)) + back if others else ""
        request = CompletionRequest(
            request_id, () if codec.render else ids, policy, config.temperature,
            config.topP, heal="" if codec.render else prompt.heal,
            suffix_ids=() if codec.render else prompt.suffix_ids)
        return BackendRequest(request, text, stop_strings(policy), cursor.uri, rebuild=build,
                              plain_text=plain, heal=cut)

    request = build(codec)
    # The user's code stays out of the log unless they asked for debug.
    log.info("completion %s at %d:%d: %s, %d prompt tokens%s", request_id, cursor.line,
             cursor.character, describe(context, log.isEnabledFor(logging.DEBUG)),
             len(request.request.prompt_ids) or len(request.prompt_text),
             " (characters)" if request.prompt_text else "")
    return Prepared(request, context, suffix, *windows[0])


class Prompts:
    """What a session's prompts are laid out by: other files (the open documents, the
    workspace folders' files) and, per document, where its prompts' window starts."""

    def __init__(self, documents: DocumentStore, backend_ref: Callable[[], Backend | None]):
        self.documents = documents
        self.backend_ref = backend_ref
        self.cross_file = CrossFileContext()
        # Per document, the line its last prompt's window started at, the tokens that window
        # held (context/prompt.py) and the first window's size it was started with (kept
        # while the window is: a size from a drifting prefill rate would move its start).
        self.windows: dict[str, tuple[int, int, int]] = {}
        self.roots: list[str] = []  # workspace folders (POSIX paths), set by the server
        self.workspace_files = WorkspaceFiles(parse_function)

    def prepare(self, doc: Document, cursor: Cursor, encoding: str, config: Config,
                codec: PromptCodec, grow: bool = False) -> Prepared:
        """`grow`: the prompt with the whole window (prefixTokens) a fresh start would take,
        for a warm to fill in while the user rests; the document keeps its window start."""
        def head(prefix: str, suffix: str) -> tuple[int, ...]:
            return self._other_files_ids(doc, cursor, config, codec, prefix, suffix)

        window = config.contextWindow
        kept = self.windows.get(doc.uri)
        first = kept[2] if kept is not None else self.first_tokens(config)
        sized = replace(window, firstPrefixTokens=window.prefixTokens if grow else first)
        prepared = prepare(doc, cursor, encoding, replace(config, contextWindow=sized), codec, head,
                           kept[:2] if kept is not None else None)
        if grow:
            return prepared
        if prepared.window_line is None:
            self.windows.pop(doc.uri, None)
        else:
            self.windows[doc.uri] = (prepared.window_line, prepared.window_tokens, first)
        return prepared

    def first_tokens(self, config: Config) -> int:
        """The first window's prefix tokens a document gets now, by the timed prefill rate."""
        window = config.contextWindow
        return first_window_tokens(min(window.firstPrefixTokens, window.prefixTokens), window.firstWindowS,
                                   self._warm_token_s(), window.suffixTokens)

    def _warm_token_s(self) -> float | None:
        backend = self.backend_ref()
        return backend.warm_token_s() if backend is not None else None

    def _other_files_ids(self, doc: Document, cursor: Cursor, config: Config, codec: PromptCodec,
                         prefix: str, suffix: str) -> tuple[int, ...]:
        current = source_file(doc)
        others = self.other_files(doc, config)
        if config.contextWindow.workspaceFiles and config.contextWindow.extraTokens > 0:
            others += self.workspace_files.for_document(
                current, self.roots, [o.path for o in others])
        plan = self.cross_file.prefix_ids(
            doc.uri, current, cursor.line, prefix, suffix, others, self.roots,
            config.contextWindow.extraTokens, codec.encode, codec.repo,
            config.contextWindow.extraSources)
        return plan.ids

    def window_start(self, uri: str) -> int | None:
        return self.windows.get(uri, (None,))[0]

    def grown(self, uri: str, prepared: Prepared, config: Config) -> None:
        """The whole window of a `grow` prompt is in the cache: the document's prompts take it."""
        first = self.windows.get(uri, (0, 0, config.contextWindow.firstPrefixTokens))[2]
        self.windows[uri] = (prepared.window_line, prepared.window_tokens, first)

    def other_files(self, doc: Document, config: Config, exclude: str | None = None) -> list[SourceFile]:
        """The files other-file context is drawn from: for the package head the open ones in
        the order they were opened (a file opened later appends to it), else the open and
        recently edited ones, newest first. `exclude`: the document left out (default `doc`)."""
        exclude = doc.uri if exclude is None else exclude
        docs = (self.documents.opened(doc.language_id, exclude) if package_head(config) else
                self.documents.recent(doc.language_id, exclude))
        return [source_file(d) for d in docs]

    def package_head(self, doc: Document, config: Config, codec: PromptCodec) -> list[int]:
        """The head of a prompt in a file opened next, with every open file of `doc`'s language."""
        return package_head_ids(self.other_files(doc, config, exclude=""), self.roots, doc.language_id,
                                config.contextWindow.extraTokens, codec.encode, codec.repo)

    def forget(self, uri: str) -> None:
        """A closed document: what its prompts were laid out by is dropped with it."""
        self.cross_file.forget(uri)
        self.windows.pop(uri, None)
