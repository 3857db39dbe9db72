"""Ollama `/api/generate` (NDJSON), `raw: true` with specfill's FIM text.

The last object has `done: true`, `prompt_eval_count` (tokens prefilled: Ollama does not
report reuse separately) and `eval_count`. No speculative decoding, so no draft counts. Not
warmed: Ollama keeps prefilling after a disconnect, so a real request could not stop a warm.
"""

from __future__ import annotations

from typing import Any

from lsp_server.backends.base import BackendRequest
from lsp_server.backends.wire import Chunk, Dialect, Usage, json_object


class Ollama(Dialect):
    name = "ollama"
    path = "/api/generate"
    health_path = "/api/version"
    framing = "ndjson"

    def body(self, req: BackendRequest, model: str, session: str) -> dict[str, Any]:
        r = req.request
        options = {"num_predict": r.max_new_tokens, "temperature": r.temperature,
                   "top_p": r.top_p, "stop": list(req.stop),
                   **({"seed": r.seed} if r.seed is not None else {})}
        return {"model": model, "prompt": req.prompt_text, "raw": True, "stream": True,
                "options": options}

    def parse(self, payload: str) -> Chunk | None:
        if not payload.strip():
            return None
        obj = json_object(payload)
        done = bool(obj.get("done"))
        usage = Usage(prompt_tokens=obj.get("prompt_eval_count"),
                      completion_tokens=obj.get("eval_count")) if done else Usage()
        return Chunk(text=obj.get("response") or "", done=done,
                     finish_reason=obj.get("done_reason") if done else None, usage=usage)
