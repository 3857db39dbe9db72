"""specfill's own LSP extensions: method names and payload shapes.

Streaming: `textDocument/inlineCompletion` has no partial-result token, so while tokens are
accepted the server sends `specfill/streamCompletion` notifications carrying the full
completion text so far, then answers the request with the final `InlineCompletionList`.
A client matches a notification to its request by `requestId` (the JSON-RPC id) or by
uri + version + position. Clients that ignore the notification still get the answer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

STREAM_NOTIFICATION = "specfill/streamCompletion"
STATS_REQUEST = "specfill/stats"
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
