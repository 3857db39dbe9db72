"""specfill's own LSP extensions: method names and payload shapes.

Streaming: `textDocument/inlineCompletion` has no partial-result token, so while tokens are
accepted the server sends `specfill/streamCompletion` notifications carrying the full
completion text so far, then answers the request with the final `InlineCompletionList`.
A client matches a notification to its request by `requestId` (the JSON-RPC id) or by
uri + version + position. Clients that ignore the notification still get the answer.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

STREAM_NOTIFICATION = "specfill/streamCompletion"
STATS_REQUEST = "specfill/stats"
# {"uri": ...} -> what the server holds for it, as a hash (never the text): lets a client
# or a test check that both sides have the same document.
DOCUMENT_REQUEST = "specfill/document"
# Client -> server notification, params {textDocument: {uri}, position: {line, character}}:
# the cursor rests there (cursor hold, entering insert mode); prefill its prompt now.
WARM_NOTIFICATION = "specfill/warm"
CONFIG_SECTION = "specfill"


@dataclass(frozen=True)
class StreamUpdate:
    uri: str
    version: int
    position: dict[str, int]  # {"line": .., "character": ..} as the client sent it
    requestId: int | str | None
    text: str  # the whole completion so far, cleaned as the final answer would be
    done: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def as_plain(value: Any) -> Any:
    """pygls hands custom methods' params and results over as named tuples; callers want dicts."""
    if hasattr(value, "_asdict"):
        return {k: as_plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: as_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_plain(v) for v in value]
    return value


def document_summary(doc: Any) -> dict[str, Any]:
    """`specfill/document`'s answer for a `documents.Document` (or None when not open)."""
    if doc is None:
        return {"open": False}
    return {"open": True, "version": doc.version, "sha256": hashlib.sha256(doc.source).hexdigest(),
            "bytes": len(doc.source), "inSync": doc.problem is None, "problem": doc.problem}
