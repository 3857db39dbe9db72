"""Honest metering per remote backend: the server's own numbers, added up, one usage line
each in `specfill/stats`. Nothing here holds an API key; URLs are shown without userinfo."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from lsp_server.backends.wire import Usage
from lsp_server.engine.types import percentile

_KEEP = 2000  # latencies kept for the percentiles (newest), so a long session stays bounded


@dataclass
class BackendMeter:
    name: str
    kind: str
    url: str
    requests: int = 0
    completed: int = 0
    cancelled: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0
    # Requests whose server said nothing of a number (so zero means zero, not unknown).
    unreported: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    # The server's own Prometheus totals (all its clients), when requests carry no draft counts.
    server_counters: dict = field(default_factory=dict)
    # Cache warm-ups (backends.warming): how many, how they ended, the prompt tokens they
    # made the server evaluate and those it had cached already.
    warms: Counter = field(default_factory=Counter)
    warm_steps: int = 0
    warm_evaluated_tokens: int = 0
    warm_cached_tokens: int = 0
    warm_generated_tokens: int = 0
    # The newest request's prompt as the server counted it: evaluated now, taken from cache.
    last_request: dict = field(default_factory=dict)
    first_text_s: deque = field(default_factory=lambda: deque(maxlen=_KEEP))
    latency_s: deque = field(default_factory=lambda: deque(maxlen=_KEEP))

    def add_usage(self, usage: Usage) -> None:
        for name in ("prompt_tokens", "cached_prompt_tokens", "completion_tokens",
                     "draft_tokens", "accepted_draft_tokens"):
            value = getattr(usage, name)
            if value is None:
                self.unreported[name] += 1
            else:
                setattr(self, name, getattr(self, name) + int(value))

    def add_request(self, usage: Usage) -> None:
        self.add_usage(usage)
        prompt, cached = usage.prompt_tokens, usage.cached_prompt_tokens
        self.last_request = {
            "prompt_tokens": prompt, "cached_prompt_tokens": cached,
            "evaluated_prompt_tokens": (prompt - (cached or 0)) if prompt is not None else None}

    def add_warm(self, outcome: Any) -> None:
        """`outcome`: a backends.warming.WarmOutcome."""
        self.warms[outcome.reason] += 1
        self.warm_steps += outcome.steps
        self.warm_evaluated_tokens += outcome.evaluated_tokens
        self.warm_cached_tokens += outcome.cached_tokens
        self.warm_generated_tokens += outcome.generated_tokens

    def to_json(self, healthy: bool | None = None, warming: str = "on") -> dict[str, Any]:
        first, total = sorted(self.first_text_s), sorted(self.latency_s)
        return {
            "name": self.name, "kind": self.kind, "url": self.url, "healthy": healthy,
            "requests": self.requests, "completed": self.completed, "cancelled": self.cancelled,
            "prompt_tokens": self.prompt_tokens, "cached_prompt_tokens": self.cached_prompt_tokens,
            "evaluated_prompt_tokens": self.prompt_tokens - self.cached_prompt_tokens,
            "last_request": dict(self.last_request),
            "warming": warming,
            "warms": {**dict(self.warms), "steps": self.warm_steps,
                      "evaluated_prompt_tokens": self.warm_evaluated_tokens,
                      "cached_prompt_tokens": self.warm_cached_tokens,
                      "generated_tokens": self.warm_generated_tokens},
            "completion_tokens": self.completion_tokens, "draft_tokens": self.draft_tokens,
            "accepted_draft_tokens": self.accepted_draft_tokens,
            "acceptance_rate": (self.accepted_draft_tokens / self.draft_tokens
                                if self.draft_tokens else None),
            "unreported": dict(self.unreported), "errors": dict(self.errors),
            "server_counters": dict(self.server_counters),
            "first_text_p50_s": percentile(first, 50), "first_text_p95_s": percentile(first, 95),
            "latency_p50_s": percentile(total, 50), "latency_p95_s": percentile(total, 95),
        }
