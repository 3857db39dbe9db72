"""Type-through on the real pair, through the server's own prompt builder (psm-line, healed
last token, the real BPE): typing each prefix of a shown suggestion, a character at a time
(some split a token, some end inside one), gets exactly what a cold engine gives at that
document state; most are answered from the first generation."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsp_server.backends.base import PromptCodec
from lsp_server.backends.local_runtime import load_runtime
from lsp_server.completion.documents import DocumentStore
from lsp_server.completion.prompts import Cursor, prepare
from lsp_server.completion.streams import clean
from lsp_server.config import Config
from lsp_server.engine.types import Finished

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inventory.py"
URI = EXAMPLE.as_uri()
# (line, character, text typed at the cursor first): an empty method body, and a line
# that ends inside a token once `inventory.` is typed.
SPOTS = [(27, 8, ""), (40, 4, "inventory.")]


@pytest.fixture(scope="module")
def runtime(real_cache):
    return load_runtime(Config(), lambda _: None)


def answer(runtime, config: Config, text: str, line: int, character: int) -> tuple[str, Finished]:
    doc = DocumentStore().open(URI, "python", 1, text)
    prepared = prepare(doc, Cursor(URI, 1, line, character), "utf-16", config,
                       PromptCodec(runtime.encode, runtime.fim))
    final = list(runtime.engine.generate(prepared.request.request))[-1]
    return clean(final.text, prepared.suffix, final=True), final


def cold(runtime, config, text, line, character) -> tuple[str, Finished]:
    engine = runtime.engine
    kept = list(engine.lineages)
    engine.clear_caches()  # the lineages too
    try:
        return answer(runtime, config, text, line, character)
    finally:
        engine.lineages.extend(kept)


@pytest.mark.parametrize("line,character,typed", SPOTS)
def test_each_typed_prefix_equals_a_cold_request(runtime, line, character, typed):
    config = Config(maxNewTokens=16)
    lines = EXAMPLE.read_text().split("\n")
    lines[line] = lines[line][:character] + typed + lines[line][character:]
    base, character = "\n".join(lines), character + len(typed)
    shown, _ = answer(runtime, config, base, line, character)
    assert len(shown) >= 6, shown
    served = 0
    for n in range(1, min(len(shown), 9)):
        row = lines[line]
        text = "\n".join(lines[:line] + [row[:character] + shown[:n] + row[character:]] + lines[line + 1:])
        got, final = answer(runtime, config, text, line, character + n)
        want, fresh = cold(runtime, config, text, line, character + n)
        # Token ids past the stop rule's cut depend on where a round ended: the text counts.
        assert (got, final.text, final.reason) == (want, fresh.text, fresh.reason), (n, shown[:n])
        served += final.stats.known_tokens > 0
    assert served >= (min(len(shown), 9) - 1) // 2
