"""One remote serving engine at one URL: stream a completion over HTTP, meter it, stop it.

A generation runs in its own task that reads the HTTP stream; stopping it (the consumer went
away, `abort(id)`, the stop rule fired) cancels that task, and leaving `client.stream(...)`
closes the connection at once, which is how serving engines learn to stop generating.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Iterator

import httpx

from lsp_server.backends.base import BackendRequest
from lsp_server.backends.llama_server import LlamaServer
from lsp_server.backends.metering import BackendMeter
from lsp_server.backends.ollama import Ollama
from lsp_server.backends.openai import OpenAI
from lsp_server.backends.prompt_text import QWEN_STOP_TEXT
from lsp_server.backends.warming import DOWN, WarmState
from lsp_server.backends.wire import (Chunk, Dialect, RemoteError, Usage, error_message,
                                      json_object, prometheus_counters, sse_payload)
from lsp_server.engine.stopping import stop_index
from lsp_server.engine.types import DrafterStats, EngineEvent, Finished, Stats, TextDelta
from lsp_server.urls import display_url

log = logging.getLogger(__name__)

DIALECTS: dict[str, type[Dialect]] = {"openai": OpenAI, "llama-server": LlamaServer, "ollama": Ollama}
SESSION_HEADER = "x-session-id"
SCRAPE_INTERVAL_S = 5.0  # at most this often, /metrics is read for server-wide draft counters


@dataclass(frozen=True)
class RemoteSettings:
    url: str
    kind: str  # a key of DIALECTS
    model: str = ""
    api_key: str | None = None
    ca_file: str = ""
    timeout_s: float = 30.0


def tls_context(ca_file: str) -> ssl.SSLContext:
    """Verified TLS: the system's trust store, or only `ca_file` when one is given."""
    return ssl.create_default_context(cafile=ca_file or None)


class RemoteBackend:
    def __init__(self, settings: RemoteSettings):
        self.settings = settings
        self.dialect = DIALECTS[settings.kind]()
        self.url = display_url(settings.url)
        self.meter = BackendMeter(f"{settings.kind} {self.url}", settings.kind, self.url)
        self.healthy = True
        self.last_error: RemoteError | None = None
        self._client: httpx.AsyncClient | None = None
        self._metrics: bool | None = None  # whether the server exposes /metrics (None: unknown)
        self._scraped_at = float("-inf")
        self._scrape: asyncio.Task | None = None
        self.active = 0  # real requests streaming from this server now
        self.warming = WarmState()
        # False once the server refused a prompt with other files' chunks (too long for its
        # context, say): it gets the file alone from then on.
        self.repo_layout = True
        # The text this server's cache last took from specfill (a prompt and what was
        # generated after it): a warm starts its steps where a new prompt leaves it.
        self.cached_text = ""

    def client(self) -> httpx.AsyncClient:
        # Built on first use, inside the event loop that will use it.
        if self._client is None:
            s = self.settings
            headers = {"authorization": f"Bearer {s.api_key}"} if s.api_key else {}
            verify: Any = tls_context(s.ca_file) if s.url.startswith("https:") else True
            self._client = httpx.AsyncClient(
                base_url=s.url.rstrip("/"), headers=headers, verify=verify, trust_env=False,
                timeout=httpx.Timeout(s.timeout_s, connect=min(s.timeout_s, 5.0)))
        return self._client

    async def prime(self) -> None:
        """Build the client (its TLS context costs ~40 ms on a busy 2-core machine) and open a
        pooled connection with one health request, so that the first completion does not pay
        for either. A failure here is not an error: requests and health checks decide."""
        try:
            await self.client().get(self.dialect.health_path, timeout=3.0)
        except (httpx.HTTPError, OSError):
            pass

    def scrub(self, text: str) -> str:
        key = self.settings.api_key
        return text.replace(key, "***") if key else text

    async def check_health(self) -> bool:
        try:
            response = await self.client().get(self.dialect.health_path, timeout=3.0)
        except (httpx.HTTPError, OSError):
            return False
        return response.status_code == 200

    async def generate(self, req: BackendRequest, session: str) -> AsyncIterator[EngineEvent]:
        """TextDelta events (the full text so far) and one Finished; raises RemoteError when the
        request failed before it finished. Cancelling the consumer closes the stream."""
        self.meter.requests += 1
        self.warming.cancel()  # a real request never waits behind a warm (backends.warming)
        self.active += 1
        try:
            async with contextlib.aclosing(self._generate(req, session)) as events:
                async for event in events:
                    yield event
        finally:
            self.active -= 1

    def text_for(self, req: BackendRequest) -> str:
        """The prompt this server is sent for `req`: the file alone once it refused the
        repository-level layout (a prompt too long for it), else the full prompt."""
        return req.plain_text if req.plain_text and not self.repo_layout else req.prompt_text

    async def _generate(self, req: BackendRequest, session: str) -> AsyncIterator[EngineEvent]:
        started = time.perf_counter()
        stats = Stats(stop_reason="")
        usage, text, raw, finished = Usage(), "", "", False
        req = replace(req, prompt_text=self.text_for(req), plain_text="")
        body = self.dialect.body(req, self.settings.model, session)
        self.cached_text = req.prompt_text  # what the slot will hold, however this ends
        try:
            with self._failures():
                async with self.client().stream("POST", self.dialect.path, json=body,
                                                headers={SESSION_HEADER: session}) as response:
                    if response.status_code != 200:
                        raise self._http_error(response.status_code, await response.aread())
                    async for chunk in self._chunks(response):
                        usage.merge(chunk.usage)
                        raw += chunk.text
                        new = _healed(raw, req.heal)
                        if new is None:  # it does not continue the cut whitespace: no answer
                            new, stats.stop_reason = "", "stop-rule"
                        cut = _cut(new, req)
                        if cut is not None:
                            new, stats.stop_reason = new[:cut], "stop-rule"
                        if new != text:
                            now = time.perf_counter() - started
                            if stats.ttft_s is None:
                                stats.ttft_s = now
                                self.meter.first_text_s.append(now)
                            stats.token_times_s.append(now)
                            yield TextDelta(req.id, new[len(text):], new)
                            text = new
                        if stats.stop_reason or chunk.done:
                            # Leaving `async with` closes the stream: a stop-rule cut ends the
                            # server's work too.
                            stats.stop_reason = stats.stop_reason or _reason(chunk.finish_reason)
                            finished = True
                            break
                if not finished:
                    raise RemoteError("protocol", f"{self.url} ended the stream without a final chunk")
        except (asyncio.CancelledError, GeneratorExit):
            self.meter.cancelled += 1
            raise
        stats.total_s = time.perf_counter() - started
        self.cached_text = req.prompt_text + raw
        self._record(usage, stats)
        if usage.draft_tokens is None:
            self._maybe_scrape()
        self.healthy, self.last_error = True, None
        yield Finished(req.id, text, (), stats, stats.stop_reason)

    async def warm_step(self, prompt: str, session: str) -> Usage:
        """One warm request (backends.warming): the server loads `prompt`, generates nothing.
        Raises RemoteError like a request does, and counts in the server's health alike."""
        body = self.dialect.warm_body(prompt, self.settings.model, session)
        assert body is not None
        with self._failures(health_only=True):
            response = await self.client().post(self.dialect.path, json=body,
                                                headers={SESSION_HEADER: session})
            if response.status_code != 200:
                raise self._http_error(response.status_code, response.content)
            usage = self.dialect.warm_usage(json_object(response.text))
            self.cached_text = prompt
        self.healthy = True
        return usage

    async def _chunks(self, response: httpx.Response) -> AsyncIterator[Chunk]:
        async for line in response.aiter_lines():
            payload = sse_payload(line) if self.dialect.framing == "sse" else line
            if payload is None:
                continue
            chunk = self.dialect.parse(payload)
            if chunk is not None:
                yield chunk

    def _record(self, usage: Usage, stats: Stats) -> None:
        self.meter.completed += 1
        self.meter.add_request(usage)
        self.meter.latency_s.append(stats.total_s)
        stats.prompt_tokens = usage.prompt_tokens or 0
        stats.prefilled_tokens = (usage.prompt_tokens or 0) - (usage.cached_prompt_tokens or 0)
        stats.generated_tokens = usage.completion_tokens or len(stats.token_times_s)
        if usage.draft_tokens:
            stats.drafters["server-draft"] = DrafterStats(
                drafted=usage.draft_tokens, accepted=usage.accepted_draft_tokens or 0)

    def _maybe_scrape(self) -> None:
        now = time.monotonic()
        if self._metrics is False or now - self._scraped_at < SCRAPE_INTERVAL_S:
            return
        if self._scrape is None or self._scrape.done():
            self._scraped_at = now
            self._scrape = asyncio.get_running_loop().create_task(self.scrape_counters())

    async def scrape_counters(self) -> None:
        """The server's speculative decoding totals from /metrics, into the usage line."""
        try:
            response = await self.client().get("/metrics", timeout=3.0)
        except (httpx.HTTPError, OSError):
            return
        self._metrics = response.status_code == 200
        if self._metrics:
            counters = prometheus_counters(response.text)
            if counters:
                self.meter.server_counters = {**counters, "source": "/metrics, server-wide"}

    @contextlib.contextmanager
    def _failures(self, health_only: bool = False) -> Iterator[None]:
        """A failed request, however it failed, as one RemoteError counted in the health.
        `health_only` (a warm): only an outage is counted; a refusal (a key, TLS, a body)
        leaves the health and the last error to the real requests, which tell the user."""
        try:
            yield
        except RemoteError as exc:
            if not health_only or exc.kind in DOWN:
                self._fail(exc)
            raise
        except httpx.HTTPError as exc:
            error = self._transport_error(exc)
            if not health_only or error.kind in DOWN:
                self._fail(error)
            raise error from None

    def _fail(self, error: RemoteError) -> None:
        self.meter.errors[error.kind] += 1
        self.last_error = error
        if error.kind in ("connect", "timeout", "tls", "http_5xx", "auth"):
            self.healthy = False

    def _http_error(self, status: int, body: bytes) -> RemoteError:
        said = self.scrub(error_message(body))
        if status in (401, 403):
            return RemoteError("auth", f"{self.url} refused the API key (HTTP {status}: {said}); "
                               "check backend.apiKeyEnv / backend.apiKeyFile")
        if status >= 500:
            return RemoteError("http_5xx", f"{self.url} answered HTTP {status}: {said}")
        # A bad request would be as bad on another server: do not retry it elsewhere.
        return RemoteError("http_4xx", f"{self.url} rejected the request (HTTP {status}: {said})",
                           retry=status in (404, 408, 429))

    def _transport_error(self, exc: httpx.HTTPError) -> RemoteError:
        text = self.scrub(str(exc) or type(exc).__name__)
        if "CERTIFICATE_VERIFY_FAILED" in text or isinstance(exc.__cause__, ssl.SSLError):
            return RemoteError("tls", f"TLS verification failed for {self.url} ({text}); "
                               "set backend.caFile to the CA that signed its certificate")
        if isinstance(exc, httpx.TimeoutException):
            return RemoteError("timeout", f"{self.url} did not answer within "
                               f"{self.settings.timeout_s:g} s (backend.timeoutS)")
        if isinstance(exc, (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError)):
            return RemoteError("connect", f"cannot reach {self.url} ({text})")
        return RemoteError("connect", f"{self.url}: {type(exc).__name__}: {text}")

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _healed(raw: str, heal: str) -> str | None:
    """The server's output so far less the healed whitespace it must start with ("" until
    that is written out); None once it has written something else."""
    if raw.startswith(heal):
        return raw[len(heal):]
    return "" if heal.startswith(raw) else None


def _cut(text: str, req: BackendRequest) -> int | None:
    """Where the policy's stop rule, a stop string or a control token's text ends `text`."""
    return stop_index(text, req.request.policy.stop, (*req.stop, *QWEN_STOP_TEXT))


def _reason(finish_reason: str | None) -> str:
    return {"length": "max-tokens", "limit": "max-tokens", "stop": "eos", "eos": "eos",
            "word": "stop-rule"}.get(finish_reason or "", finish_reason or "eos")
