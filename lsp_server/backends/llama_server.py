"""llama.cpp's `llama-server`, native `/completion` (SSE).

The prompt is specfill's own FIM text (psm-line keeps consecutive prompts growing at the end,
which is what `cache_prompt` reuses). The last chunk carries `timings`: `prompt_n` (tokens
prefilled), `cache_n` (reused from the slot's cache), `predicted_n`, and `draft_n` /
`draft_n_accepted` when a `-md` draft model ran. A warm is `n_predict: 0` (load the prompt,
generate nothing: llama.vim's warm-up), answered with the same `timings`.
"""

from __future__ import annotations

from typing import Any

from lsp_server.backends.base import BackendRequest
from lsp_server.backends.wire import Chunk, Dialect, Usage, json_object, sampling


def speculative_fields(req: BackendRequest) -> dict[str, Any]:
    """The syntax policy's draft bounds, as llama-server takes them per request. Builds whose
    schema compiles these out (the llama.cpp vendored by llama-cpp-python 0.3.36) ignore them
    and use the server's `--spec-draft-n-max`."""
    policy = req.request.policy
    n_max = 0 if policy.mode == "off" or not policy.model_draft else policy.k_max
    return {"speculative.n_max": n_max, "speculative.n_min": min(policy.k_min, n_max),
            "speculative.p_min": policy.draft_p_min}


def usage_from_timings(obj: dict[str, Any]) -> Usage:
    timings = obj.get("timings")
    if not isinstance(timings, dict):
        return Usage()
    prompt_n, cache_n = timings.get("prompt_n"), timings.get("cache_n")
    total = prompt_n + cache_n if isinstance(prompt_n, int) and isinstance(cache_n, int) else prompt_n
    return Usage(prompt_tokens=total, cached_prompt_tokens=cache_n,
                 completion_tokens=timings.get("predicted_n"),
                 # Absent when no drafting happened: zero drafted, not unknown.
                 draft_tokens=timings.get("draft_n", 0),
                 accepted_draft_tokens=timings.get("draft_n_accepted", 0))


class LlamaServer(Dialect):
    name = "llama-server"
    path = "/completion"
    health_path = "/health"

    def body(self, req: BackendRequest, model: str, session: str) -> dict[str, Any]:
        return {"prompt": req.prompt_text, "n_predict": req.request.max_new_tokens,
                "stream": True, "cache_prompt": True, "stop": list(req.stop),
                # `timings` in every chunk: a stream that specfill's own stop rule cuts still
                # has the server's prompt numbers.
                "timings_per_token": True,
                **sampling(req), **({"top_k": 1} if req.request.temperature == 0 else {}),
                **speculative_fields(req)}

    def parse(self, payload: str) -> Chunk | None:
        if not payload:
            return None
        obj = json_object(payload)
        done = bool(obj.get("stop"))
        return Chunk(text=obj.get("content") or "", done=done,
                     finish_reason=obj.get("stop_type") if done else None,
                     usage=usage_from_timings(obj))

    def warm_body(self, prompt: str, model: str, session: str) -> dict[str, Any] | None:
        return {"prompt": prompt, "n_predict": 0, "cache_prompt": True, "stream": False}

    def warm_usage(self, obj: dict[str, Any]) -> Usage:
        return usage_from_timings(obj)
