"""What the remote dialects share: a parsed stream chunk, usage numbers, and the two line
framings servers stream in (SSE `data:` lines, NDJSON)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from lsp_server.backends.base import BackendRequest


@dataclass
class Usage:
    """A request's numbers as the server reported them; None where it said nothing."""

    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    completion_tokens: int | None = None
    draft_tokens: int | None = None
    accepted_draft_tokens: int | None = None

    def merge(self, other: "Usage") -> None:
        for name, value in vars(other).items():
            if value is not None:
                setattr(self, name, value)


@dataclass
class Chunk:
    text: str = ""  # new text (a delta)
    done: bool = False  # the server says this is the last chunk
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)


class RemoteError(Exception):
    """A failed remote request. `kind` is what stats count (connect, timeout, auth, http_4xx,
    http_5xx, protocol, server); `retry` whether another backend may do better."""

    def __init__(self, kind: str, message: str, retry: bool = True):
        super().__init__(message)
        self.kind, self.retry = kind, retry


class ProtocolError(RemoteError):
    """The server sent something this dialect cannot read."""

    def __init__(self, message: str):
        super().__init__("protocol", message, retry=True)


def sse_payload(line: str) -> str | None:
    """The data of one SSE line, or None for comments, blank lines and other fields."""
    if not line.startswith("data:"):
        return None
    return line[5:].strip()


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {text[:80]!r}") from exc
    if not isinstance(value, dict):
        raise ProtocolError(f"expected a JSON object, got {text[:80]!r}")
    if "error" in value:  # an error inside a stream (vLLM, Ollama)
        raise RemoteError("server", f"the server reported: {error_message(text)}")
    return value


def error_message(body: bytes | str) -> str:
    """The server's own error text from an error response, at most 200 characters."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text.strip()[:200]
    if isinstance(value, dict):
        err = value.get("error", value)
        if isinstance(err, dict):
            err = err.get("message") or err
        if isinstance(value.get("detail"), str):  # FastAPI (vLLM, SGLang)
            err = value["detail"]
        return str(err)[:200]
    return text.strip()[:200]


def sampling(req: BackendRequest) -> dict[str, Any]:
    r = req.request
    return {"temperature": r.temperature, "top_p": r.top_p,
            **({"seed": r.seed} if r.seed is not None else {})}


class Dialect:
    """One serving API: where to post, the body, how to read a chunk. Subclasses stay small."""

    name = ""
    path = ""
    health_path = ""
    framing = "sse"  # "sse" | "ndjson"

    def body(self, req: BackendRequest, model: str, session: str) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, payload: str) -> Chunk | None:
        """One framed payload -> a chunk (None: nothing in it, e.g. a keep-alive)."""
        raise NotImplementedError

    def warm_body(self, prompt: str, model: str, session: str) -> dict[str, Any] | None:
        """A request that loads `prompt` into the server's cache and generates (next to)
        nothing, not streamed; None: this server is not warmed (backends.warming)."""
        return None

    def warm_usage(self, obj: dict[str, Any]) -> Usage:
        """The prompt numbers of a warm's (non-streamed) answer."""
        return Usage()


# Server-wide speculative decoding counters, for servers whose responses carry no per-request
# draft counts (vLLM without --per-request-spec-decode-metrics). Same names in vLLM (`vllm:`)
# and llama-server (`llamacpp:`, with --metrics).
SPEC_COUNTERS = ("spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total",
                 "spec_decode_num_drafts_total")


def prometheus_counters(text: str, names: tuple[str, ...] = SPEC_COUNTERS) -> dict[str, float]:
    """Sum each named counter over its label sets (vLLM labels by engine and model)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or ":" not in line:
            continue
        metric, _, value = line.rpartition(" ")
        name = metric.split(":", 1)[1].split("{", 1)[0]
        if name in names:
            try:
                out[name] = out.get(name, 0.0) + float(value)
            except ValueError:
                continue
    return out
