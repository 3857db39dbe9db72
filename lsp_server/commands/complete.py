"""`specfill complete FILE --line L --col C`: one completion without an editor, streamed."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from lsp_server.completion.documents import DocumentStore
from lsp_server.completion.prompts import Cursor, prepare
from lsp_server.completion.streams import clean
from lsp_server.config import Config, ModelConfig, SpeculationConfig

_EXTENSIONS = {".py": "python", ".js": "javascript", ".jsx": "javascriptreact", ".ts": "typescript",
               ".tsx": "typescriptreact", ".go": "go", ".rs": "rust", ".java": "java", ".c": "c",
               ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp"}


def language_of(path: Path) -> str:
    return _EXTENSIONS.get(path.suffix.lower(), "plaintext")


def complete_file(args: argparse.Namespace) -> int:
    from lsp_server.backends.base import PromptCodec
    from lsp_server.backends.local_runtime import load_runtime
    from lsp_server.engine.types import Finished, TextDelta

    path = Path(args.file)
    if not path.is_file():
        print(f"error: no such file: {path}", file=sys.stderr)
        return 2
    model = ModelConfig(**{k: v for k, v in (("target", args.target), ("draft", args.draft),
                                             ("dtype", args.dtype)) if v})
    config = replace(Config(), model=model, maxNewTokens=args.max_new_tokens,
                     speculation=SpeculationConfig(mode=args.mode))
    runtime = load_runtime(config, lambda line: print(f"[load] {line}", file=sys.stderr))
    docs = DocumentStore()
    doc = docs.open(path.resolve().as_uri(), args.language or language_of(path), 1, path.read_text())
    prepared = prepare(doc, Cursor(doc.uri, 1, args.line, args.col), "utf-16", config,
                       PromptCodec(runtime.encode, runtime.fim))
    request = prepared.request.request
    print(f"[context] {prepared.context.kind.value}, stop rule {request.policy.stop.kind}, "
          f"{len(request.prompt_ids)} prompt tokens", file=sys.stderr)
    shown = ""
    for event in runtime.generate(request, lambda: False):
        if isinstance(event, TextDelta):
            text = clean(event.text, prepared.suffix)
            if text.startswith(shown):
                sys.stdout.write(text[len(shown):])
                sys.stdout.flush()
                shown = text
        elif isinstance(event, Finished):
            final = clean(event.text, prepared.suffix, final=True)
            if not final.startswith(shown):
                sys.stdout.write(f"\n[final]\n{final}")
            sys.stdout.write("\n")
            print(json.dumps(event.stats.to_dict(), indent=1), file=sys.stderr)
    return 0
