"""LSP languageId -> tree-sitter grammar, from the per-language grammar wheels."""

from __future__ import annotations

import importlib
from functools import lru_cache

from tree_sitter import Language, Parser

# languageId (as editors send it) -> (grammar module, function returning the language pointer)
_GRAMMARS: dict[str, tuple[str, str]] = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "javascriptreact": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "typescriptreact": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "java": ("tree_sitter_java", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
}

# Neovim filetypes and file extensions that differ from VS Code languageIds.
_ALIASES = {
    "py": "python", "js": "javascript", "jsx": "javascriptreact", "ts": "typescript",
    "tsx": "typescriptreact", "rs": "rust", "h": "c", "cc": "cpp", "cxx": "cpp",
    "hpp": "cpp", "c++": "cpp",
}


def canonical_language(language_id: str) -> str:
    lid = language_id.lower()
    return _ALIASES.get(lid, lid)


@lru_cache(maxsize=None)
def get_language(language_id: str) -> Language | None:
    """The grammar for an LSP languageId, or None when we have none (the caller falls back)."""
    entry = _GRAMMARS.get(canonical_language(language_id))
    if entry is None:
        return None
    module_name, function_name = entry
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    return Language(getattr(module, function_name)())


def make_parser(language_id: str) -> Parser | None:
    language = get_language(language_id)
    return Parser(language) if language is not None else None
