"""OpenAI-compatible `/v1/completions` (SSE): vLLM, SGLang, TGI, llama-server.

No `suffix` (vLLM answers 400): the prompt is specfill's FIM text. `stream_options.
include_usage` makes the last chunk carry `usage` (vLLM adds `prompt_tokens_details.
cached_tokens` with `--enable-prompt-tokens-details`). `session_id` (vLLM) and the
`x-session-id` header let a router keep a document on one engine. Draft counts: vLLM's
per-request `metrics.speculative_decoding` (`--per-request-spec-decode-metrics`), or
llama-server's `timings` when it is the server. A warm is a one-token request: vLLM and SGLang
keep its prefix with their automatic prefix caching.
"""

from __future__ import annotations

from typing import Any

from lsp_server.backends.base import BackendRequest
from lsp_server.backends.llama_server import usage_from_timings
from lsp_server.backends.wire import Chunk, Dialect, Usage, json_object, sampling


def _usage(obj: dict[str, Any]) -> Usage:
    usage = Usage()
    u = obj.get("usage")
    if isinstance(u, dict):
        details = u.get("prompt_tokens_details") or {}
        usage.merge(Usage(prompt_tokens=u.get("prompt_tokens"),
                          cached_prompt_tokens=details.get("cached_tokens"),
                          completion_tokens=u.get("completion_tokens")))
    spec = (obj.get("metrics") or {}).get("speculative_decoding") if isinstance(
        obj.get("metrics"), dict) else None
    if isinstance(spec, dict):
        usage.merge(Usage(draft_tokens=spec.get("num_draft_tokens"),
                          accepted_draft_tokens=spec.get("num_accepted_draft_tokens",
                                                         spec.get("num_accepted_tokens"))))
    if "timings" in obj:  # llama-server behind its OpenAI route
        usage.merge(usage_from_timings(obj))
    return usage


class OpenAI(Dialect):
    name = "openai"
    path = "/v1/completions"
    health_path = "/v1/models"

    def body(self, req: BackendRequest, model: str, session: str) -> dict[str, Any]:
        return {**({"model": model} if model else {}), "prompt": req.prompt_text,
                "max_tokens": req.request.max_new_tokens, "stop": list(req.stop) or None,
                "stream": True, "stream_options": {"include_usage": True},
                "session_id": session, **sampling(req)}

    def parse(self, payload: str) -> Chunk | None:
        if not payload:
            return None
        if payload == "[DONE]":
            return Chunk(done=True)
        obj = json_object(payload)
        choices = obj.get("choices") or []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        return Chunk(text=choice.get("text") or "", finish_reason=choice.get("finish_reason"),
                     usage=_usage(obj))

    def warm_body(self, prompt: str, model: str, session: str) -> dict[str, Any] | None:
        return {**({"model": model} if model else {}), "prompt": prompt, "max_tokens": 1,
                "temperature": 0.0, "stream": False, "session_id": session}

    def warm_usage(self, obj: dict[str, Any]) -> Usage:
        return _usage(obj)
