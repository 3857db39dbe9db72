"""`specfill bench remote`: specfill in front of real llama-servers on this machine.

Three parts (`--part`, default all):
- overhead: time to the first streamed text through specfill over stdio vs a raw streaming
  HTTP client posting the very same body to the same server, per prompt, both with the
  prompt already in the server's cache (a raw warm-up request first) and the server idle
  (each waits for /slots to show no slot processing; the two alternate who goes first), so
  the difference is what specfill adds: LSP, prompt building, routing, parsing, notifications.
- cancel: a long completion cancelled after its first streamed text; time until the server's
  `/slots` shows the slot idle (polled every 5 ms from the benchmark's event loop over one
  kept-alive connection), and the server's own time per token on the same prompts: it
  notices a closed stream when it writes its next token and then finishes the step under way.
- failover: a typing trace of N requests over several documents on two servers, every
  `--burst`-th keystroke typed before the previous answer (a superseded request); one server
  is killed halfway. Checks that every request is answered exactly once and that a document
  stays on its server while that server lives.
- warm: what a real request waits behind a cache warm-up (backends.warming). Per sample, a
  short cold request (a 64-token window) alone, and the same request sent `--warm-delay-s`
  into a warm of another long prompt (the two alternate who goes first; a long warm of a
  third prompt between them evicts the slot), first as specfill sends warms (steps of
  WARM_STEP_TOKENS) and then as one whole-prompt request (a warm of 1,024 tokens); beside
  them the server's time for that warm's first step sent cold (the step the request met)
  and for one token. Its server runs with
  `--cache-ram 0`, so an evicted prompt is gone. Goes through the Router and the real
  server, not the LSP (overhead measures that).
Output: DIR/results.json and DIR/results.md.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import sysconfig
import time
from pathlib import Path
from typing import Any

import httpx

from lsp_server.backends.llama_binary import LlamaServerProcess, llama_server_path
from lsp_server.backends.llama_server import LlamaServer
from lsp_server.backends.prompt_text import TextCodec
from lsp_server.backends.remote import RemoteBackend, RemoteSettings
from lsp_server.backends.routing import Router, session_key
from lsp_server.backends.warming import WARM_STEP_TOKENS, warm_cuts
from lsp_server.bench.report import markdown_table, plain_args, write_json
from lsp_server.client import RequestCancelled, SpecfillClient
from lsp_server.completion.documents import DocumentStore
from lsp_server.completion.prompts import Cursor, prepare
from lsp_server.config import config_from_options
from lsp_server.engine.types import percentile
from lsp_server.models.registry import resolve_cache_dir

TARGETS = {"first_text_overhead_p50_s": 0.030, "cancel_idle_p95_s": 0.250,
           "warm_wait_over_step_p50": 1.0}
POLL_S = 0.005  # /slots polling interval


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--part", choices=["overhead", "cancel", "failover", "warm", "all"], default="all")
    p.add_argument("--warms", type=int, default=6, help="warm: samples")
    p.add_argument("--warm-delay-s", type=float, default=0.3,
                   help="warm: how long after the warm starts the real request comes")
    p.add_argument("--out", default="bench-results/remote")
    p.add_argument("--file", default=None, help="Python source for the prompts (default: the stdlib's glob.py)")
    p.add_argument("--prompts", type=int, default=20, help="overhead: prompts (cursor spots)")
    p.add_argument("--cancels", type=int, default=20, help="cancel: cancelled requests")
    p.add_argument("--requests", type=int, default=1000, help="failover: requests in the trace")
    p.add_argument("--docs", type=int, default=8, help="failover: documents typed into")
    p.add_argument("--burst", type=int, default=5, help="failover: every Nth request is superseded")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--threads", type=int, default=2, help="llama-server threads")
    p.add_argument("--draft", action="store_true", help="overhead/cancel: add the -md draft model")
    p.add_argument("--target-gguf", default=None)
    p.add_argument("--draft-gguf", default=None)


def gguf(name: str, given: str | None) -> Path:
    if given:
        return Path(given)
    found = sorted((resolve_cache_dir() / name).glob("*.gguf"))
    if not found:
        raise SystemExit(f"no GGUF in {resolve_cache_dir() / name}: run `specfill models fetch`")
    return found[0]


def spots(source: str, n: int) -> list[tuple[int, int]]:
    """Cursor spots at the start of statements inside functions, spread over the file."""
    lines = source.splitlines()
    found = sorted({(node.lineno - 1, node.col_offset) for fn in ast.walk(ast.parse(source))
                    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                    for node in fn.body if node.lineno - 1 < len(lines)})
    step = max(len(found) // max(n, 1), 1)
    return found[::step][:n]


def half_typed(source: str, spot: tuple[int, int]) -> tuple[str, tuple[int, int]]:
    """The source with the statement line at `spot` cut halfway (the rest is what a
    completion should write), and the cursor at the cut."""
    lines = source.splitlines(keepends=True)
    line, col = spot
    text = lines[line].rstrip("\r\n")
    cut = col + max((len(text) - col) // 2, 1)
    lines[line] = text[:cut] + "\n"
    return "".join(lines), (line, cut)


def options(urls: list[str], max_new_tokens: int) -> dict[str, Any]:
    return {"backend": {"kind": "llama-server", "urls": urls, "timeoutS": 120.0},
            "maxNewTokens": max_new_tokens}


def body_for(source: str, uri: str, spot: tuple[int, int], opts: dict) -> dict[str, Any]:
    """The exact body specfill posts for this cursor."""
    config, _ = config_from_options(opts)
    docs = DocumentStore()
    doc = docs.open(uri, "python", 1, source)
    prepared = prepare(doc, Cursor(uri, 1, *spot), "utf-16", config, TextCodec().as_prompt_codec())
    return LlamaServer().body(prepared.request, "", session_key(uri))


async def raw_first_text(client: httpx.AsyncClient, url: str, body: dict) -> float | None:
    """Time to the first non-blank streamed text. The stream is then read to its end, as
    specfill reads it, so the server is not left generating into the next measurement."""
    t0 = time.monotonic()
    first = None
    async with client.stream("POST", url + "/completion", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                obj = json.loads(line[5:])
                if first is None and (obj.get("content") or "").strip():
                    first = time.monotonic() - t0
                if obj.get("stop"):
                    break
    return first


async def busy(client: httpx.AsyncClient, url: str) -> bool:
    """Whether the server's slot is generating (GET /slots)."""
    return any(s["is_processing"] for s in (await client.get(url + "/slots")).json())


async def wait_idle(client: httpx.AsyncClient, url: str, poll_s: float = POLL_S,
                    timeout_s: float = 120.0) -> float:
    """Seconds until /slots shows no slot processing. Polled from this event loop over one
    kept-alive connection: a fresh client per poll (a thread, a TLS context, a TCP handshake)
    costs tens of ms of the same two cores the server decodes on, and is that coarse."""
    t0 = time.monotonic()
    while await busy(client, url):
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"{url} still busy after {timeout_s:.0f} s")
        await asyncio.sleep(poll_s)
    return time.monotonic() - t0


async def part_overhead(args, source: str, uri: str, server: LlamaServerProcess) -> dict:
    """Both sides start on an idle server with the prompt cached, and alternate which goes
    first. (A raw client that stops reading at its first text leaves the server generating
    until it notices; a request sent right then waits for the slot. The first version of this
    benchmark did that before every specfill request, and only there.)"""
    # No warms here: one would run between a measurement's idle check and its request (the
    # first run with warms had +-4 s on either side); `--part warm` measures them.
    opts = {**options([server.url], args.max_new_tokens), "warm": False}
    rows = []
    async with SpecfillClient(opts) as c, httpx.AsyncClient(timeout=120) as raw:
        await c.wait_ready(30)

        async def through_specfill(doc_uri: str, spot: tuple[int, int]) -> float | None:
            await wait_idle(raw, server.url)
            _, timings = await c.complete(doc_uri, *spot)
            return timings.first_text_s

        async def direct(body: dict) -> float | None:
            await wait_idle(raw, server.url)
            return await raw_first_text(raw, server.url, body)

        for i, statement in enumerate(spots(source, args.prompts)):
            text, spot = half_typed(source, statement)
            doc_uri = f"{uri}.overhead{i}.py"
            c.open(doc_uri, "python", text)
            body = body_for(text, doc_uri, spot, opts)
            await direct(body)  # warm-up: the prompt into the cache
            if i % 2 == 0:
                specfill_s, raw_s = await through_specfill(doc_uri, spot), await direct(body)
            else:
                raw_s, specfill_s = await direct(body), await through_specfill(doc_uri, spot)
            if specfill_s is not None and raw_s is not None:
                rows.append({"spot": spot, "specfill_s": specfill_s, "raw_s": raw_s,
                             "overhead_s": specfill_s - raw_s})
    over = sorted(r["overhead_s"] for r in rows)
    return {"samples": len(rows), "first_text_overhead_p50_s": percentile(over, 50),
            "first_text_overhead_p95_s": percentile(over, 95),
            "specfill_first_text_p50_s": percentile(sorted(r["specfill_s"] for r in rows), 50),
            "raw_first_text_p50_s": percentile(sorted(r["raw_s"] for r in rows), 50), "rows": rows}


async def part_cancel(args, source: str, uri: str, server: LlamaServerProcess) -> dict:
    idle: list[float] = []
    steps: list[float] = []  # the server's seconds per generated token, to read `idle` against
    async with SpecfillClient(options([server.url], 400)) as c, httpx.AsyncClient(timeout=10) as poll:
        await c.wait_ready(30)
        for i, statement in enumerate(spots(source, args.cancels)):
            text, spot = half_typed(source, statement)
            doc_uri = f"{uri}.cancel{i}.py"
            c.open(doc_uri, "python", text)
            await wait_idle(poll, server.url)
            msg_id = c.next_id()
            first = asyncio.get_running_loop().create_future()
            task = asyncio.ensure_future(c.complete(
                doc_uri, *spot, msg_id, on_update=lambda u, f=first: f.done() or f.set_result(u)))
            done, _ = await asyncio.wait([first, task], timeout=120, return_when=asyncio.FIRST_COMPLETED)
            if task in done:  # finished before any text: nothing to cancel
                continue
            c.cancel(msg_id)
            t0 = time.monotonic()
            while await busy(poll, server.url):
                await asyncio.sleep(POLL_S)
            idle.append(time.monotonic() - t0)
            try:
                await task
            except RequestCancelled:
                pass
            # The server's own time per token on this prompt: it notices a closed stream only
            # when it writes its next token, then finishes the decode step under way.
            body = {**body_for(text, doc_uri, spot, options([server.url], 400)), "n_predict": 16,
                    "stream": False, "stop": [], "ignore_eos": True}  # the cached prompt
            timings = (await poll.post(server.url + "/completion", json=body, timeout=120)).json()["timings"]
            steps.append(timings["predicted_ms"] / 1000 / max(timings["predicted_n"], 1))
    idle.sort()
    return {"samples": len(idle), "cancel_idle_p50_s": percentile(idle, 50),
            "cancel_idle_p95_s": percentile(idle, 95), "idle_s": idle,
            "server_token_interval_p50_s": percentile(sorted(steps), 50), "poll_interval_s": POLL_S}


async def part_failover(args, source: str, servers: list[LlamaServerProcess]) -> dict:
    uris = [f"file:///bench/doc{i}.py" for i in range(args.docs)]
    lines = source.splitlines()
    start_line = len(lines) // 2
    answered: dict[str, str] = {}
    homes: dict[str, list[str]] = {u: [] for u in uris}
    killed_at = args.requests // 2
    killed_url = None
    async with SpecfillClient(options([s.url for s in servers], args.max_new_tokens)) as c:
        await c.wait_ready(30)
        for u in uris:
            c.open(u, "python", source)
        cols = {u: len(lines[start_line]) for u in uris}
        versions = {u: 1 for u in uris}

        def served_by(before: dict, after: dict) -> list[str]:
            return [url for url in after if after[url] > before.get(url, 0)]

        async def counts() -> dict:
            # Requests that reached an end on a server (a failed try elsewhere does not count).
            return {b["url"]: b["completed"] + b["cancelled"] for b in (await c.stats())["backends"]}

        sent = 0
        while sent < args.requests:
            if sent >= killed_at and killed_url is None:
                servers[0].kill()
                killed_url = servers[0].url
            uri = uris[sent % len(uris)]
            n = 2 if (sent // len(uris)) % args.burst == 0 else 1  # a superseded pair
            before = await counts()
            futures = []
            for _ in range(min(n, args.requests - sent)):
                versions[uri] += 1
                c.insert(uri, versions[uri], start_line, cols[uri], "x")
                cols[uri] += 1
                msg_id = c.next_id()
                futures.append((msg_id, c.send_completion(uri, start_line, cols[uri], msg_id)))
                sent += 1
            for msg_id, future in futures:
                try:
                    await future
                    answered[msg_id] = "result"
                except RequestCancelled:
                    answered[msg_id] = "cancelled"
                except Exception as exc:  # an error answer is still an answer, counted apart
                    answered[msg_id] = f"error: {type(exc).__name__}"
            homes[uri].append((killed_url is not None, served_by(before, await counts())))
        final = await c.stats()
    moved = {}
    for u, history in homes.items():
        pre = {url for after, urls in history if not after for url in urls}
        post = {url for after, urls in history if after for url in urls}
        # Before the kill one server per document; after it, a document of the survivor stays.
        if len(pre) > 1 or (pre and killed_url not in pre and post and post != pre) or killed_url in post:
            moved[u] = {"before": sorted(pre), "after": sorted(post)}
    outcomes: dict[str, int] = {}
    for v in answered.values():
        outcomes[v] = outcomes.get(v, 0) + 1
    return {"requests": args.requests, "answered": len(answered), "outcomes": outcomes,
            "killed": killed_url, "killed_at_request": killed_at,
            "documents_that_moved_while_their_server_lived": moved,
            "backends": final["backends"]}


def long_prompt_request(source: str, uri: str, tag: str, tokens: int) -> Any:
    """A prompt of about `tokens` pieces no other prompt shares: its first line is `tag`, and
    the document is cut short enough for the prefix window to hold all of it."""
    opts = options(["http://127.0.0.1:1"], 8)
    opts["contextWindow"] = {"prefixTokens": tokens, "suffixTokens": 64}
    config, _ = config_from_options(opts)
    head = source[:tokens * 3]
    text = f"# {tag}\n" + head[:head.rfind("\n") + 1]
    doc = DocumentStore().open(uri, "python", 1, text)
    lines = text.splitlines()
    return prepare(doc, Cursor(uri, 1, len(lines) - 1, 0), "utf-16", config,
                   TextCodec().as_prompt_codec()).request


async def first_text_through(router: Router, request: Any) -> tuple[float, int]:
    """(seconds to the first streamed text, prompt tokens the server evaluated)."""
    t0 = time.monotonic()
    first, evaluated = None, 0
    async for event in router.submit(request):
        if first is None and getattr(event, "text", "").strip():
            first = time.monotonic() - t0
        if hasattr(event, "stats") and getattr(event, "reason", None) is not None:
            evaluated = event.stats.prefilled_tokens
    return (first if first is not None else time.monotonic() - t0), evaluated


async def part_warm(args, source: str, uri: str, server: LlamaServerProcess) -> dict:
    backend = RemoteBackend(RemoteSettings(server.url, "llama-server", timeout_s=300.0))
    router = Router([backend], lambda message: None)
    rows: list[dict] = []
    async with httpx.AsyncClient(timeout=300) as poll:
        async def warm_fully(request: Any) -> None:
            router.warm(request)
            await backend.warming.task

        async def alone(real: Any, evict: Any) -> tuple[float, int]:
            await warm_fully(evict)  # the slot holds another prompt: the request is cold
            return await first_text_through(router, real)

        async def during_warm(real: Any, evict: Any, warm: Any, step: int) -> tuple[float, int]:
            await warm_fully(evict)
            router.warm_step_tokens = step
            router.warm(warm)
            await asyncio.sleep(args.warm_delay_s)
            try:
                return await first_text_through(router, real)
            finally:
                router.warm_step_tokens = WARM_STEP_TOKENS
                await wait_idle(poll, server.url)

        for i, statement in enumerate(spots(source, args.warms)):
            text, spot = half_typed(source, statement)
            doc_uri = f"{uri}.warm{i}.py"
            # A short real request (a 64-token window): what it waits for is the warm; the
            # prefill of a long prompt varies by ±15 % run to run on a shared 2-core VM
            # (seconds for 1,000 tokens) and would drown a wait of one warm step.
            real_opts = {**options([server.url], args.max_new_tokens),
                         "contextWindow": {"prefixTokens": 64, "suffixTokens": 16}}
            real = prepare(DocumentStore().open(doc_uri, "python", 1, text), Cursor(doc_uri, 1, *spot),
                           "utf-16", config_from_options(real_opts)[0], TextCodec().as_prompt_codec()).request
            # [evict, warm] for each way of warming: evict is short, it only has to leave
            # another prompt in the slot so the request is cold.
            prompts = [long_prompt_request(source, f"{uri}.long{i}-{j}.py", f"sample {i} prompt {j}",
                                           128 if j % 2 == 0 else 1024) for j in range(4)]
            row: dict = {"spot": spot}
            for name, step in (("stepped", WARM_STEP_TOKENS), ("whole", 10**9)):
                evict, warm = prompts[:2] if name == "stepped" else prompts[2:]
                if i % 2 == 0:
                    base, base_n = await alone(real, evict)
                    with_warm, warm_n = await during_warm(real, evict, warm, step)
                else:
                    with_warm, warm_n = await during_warm(real, evict, warm, step)
                    base, base_n = await alone(real, evict)
                row[name] = {"alone_s": base, "during_warm_s": with_warm, "wait_s": with_warm - base,
                             "evaluated_alone": base_n, "evaluated_during_warm": warm_n}
            # The step the request met, cold: the first step of that same warm (its prompt
            # shares nothing with the one the slot holds), and the server's time per token.
            warm_text = backend.text_for(prompts[1])
            await warm_fully(prompts[0])
            t0 = time.monotonic()
            await backend.warm_step(warm_text[:warm_cuts(warm_text)[0]], "bench")
            row["warm_step_s"] = time.monotonic() - t0
            row["wait_over_step"] = row["stepped"]["wait_s"] / row["warm_step_s"]
            body = {**body_for(text, doc_uri, spot, options([server.url], 16)), "n_predict": 16,
                    "stream": False, "stop": [], "ignore_eos": True}
            timings = (await poll.post(server.url + "/completion", json=body)).json()["timings"]
            row["token_s"] = timings["predicted_ms"] / 1000 / max(timings["predicted_n"], 1)
            rows.append(row)
            print(f"[remote] warm {i + 1}: {row}", flush=True)
    router.stop()
    await backend.aclose()

    def p(key: str, sub: str | None = None, q: int = 50) -> float | None:
        values = sorted(r[key][sub] if sub else r[key] for r in rows)
        return percentile(values, q)

    step = p("warm_step_s")
    return {"samples": len(rows), "warm_step_tokens": WARM_STEP_TOKENS, "delay_s": args.warm_delay_s,
            "wait_stepped_p50_s": p("stepped", "wait_s"), "wait_stepped_max_s": p("stepped", "wait_s", 100),
            "wait_whole_p50_s": p("whole", "wait_s"), "wait_whole_max_s": p("whole", "wait_s", 100),
            "alone_p50_s": p("stepped", "alone_s"), "warm_step_p50_s": step,
            "token_p50_s": p("token_s"),
            "warm_wait_over_step_p50": p("wait_over_step"), "warm_wait_over_step_max": p("wait_over_step", q=100),
            "rows": rows}


def run(args: argparse.Namespace) -> int:
    if llama_server_path() is None:
        raise SystemExit("no llama-server built: run `make llama-server`")
    path = Path(args.file) if args.file else Path(sysconfig.get_paths()["stdlib"]) / "glob.py"
    source = path.read_text(encoding="utf-8")
    uri = path.resolve().as_uri()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = gguf("qwen2.5-coder-1.5b", args.target_gguf)
    draft = gguf("qwen2.5-coder-0.5b", args.draft_gguf) if args.draft else None
    result: dict[str, Any] = {"args": plain_args(args), "file": str(path), "targets": TARGETS}
    parts = ["overhead", "cancel", "failover", "warm"] if args.part == "all" else [args.part]
    if {"overhead", "cancel"} & set(parts):
        with LlamaServerProcess(target, draft, threads=args.threads,
                                log_path=out / "llama-server.log") as server:
            if "overhead" in parts:
                result["overhead"] = asyncio.run(part_overhead(args, source, uri, server))
                print(f"[remote] overhead: {summary_line(result['overhead'])}", flush=True)
            if "cancel" in parts:
                result["cancel"] = asyncio.run(part_cancel(args, source, uri, server))
                print(f"[remote] cancel: {summary_line(result['cancel'])}", flush=True)

    if "warm" in parts:
        # No host-RAM prompt cache (`--cache-ram`, 8 GiB by default in this build): it would
        # restore an evicted prompt, and the cold request would not be cold.
        with LlamaServerProcess(target, None, threads=args.threads, extra=("--cache-ram", "0"),
                                log_path=out / "llama-server-warm.log") as server:
            result["warm"] = asyncio.run(part_warm(args, source, uri, server))
        print(f"[remote] warm: {summary_line(result['warm'])}", flush=True)
    if "failover" in parts:
        servers = [LlamaServerProcess(target, threads=max(args.threads // 2, 1),
                                      log_path=out / f"llama-server-{i}.log").start() for i in range(2)]
        try:
            result["failover"] = asyncio.run(part_failover(args, source, servers))
        finally:
            for s in servers:
                s.stop()
        print(f"[remote] failover: {summary_line(result['failover'])}", flush=True)
    write_json(out / "results.json", result)
    (out / "results.md").write_text(report(result))
    print((out / "results.md").read_text())
    return 0


def summary_line(part: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in part.items() if not isinstance(v, (list, dict)))


def report(result: dict) -> str:
    rows = []
    o, c, f = result.get("overhead"), result.get("cancel"), result.get("failover")
    if o:
        rows += [["first text overhead vs raw client, p50", o["first_text_overhead_p50_s"], "s",
                  TARGETS["first_text_overhead_p50_s"], o["samples"]],
                 ["first text overhead vs raw client, p95", o["first_text_overhead_p95_s"], "s", None, o["samples"]],
                 ["first text through specfill, p50", o["specfill_first_text_p50_s"], "s", None, o["samples"]],
                 ["first text, raw client, p50", o["raw_first_text_p50_s"], "s", None, o["samples"]]]
    if c:
        rows += [["cancel -> slot idle, p50", c["cancel_idle_p50_s"], "s", None, c["samples"]],
                 ["cancel -> slot idle, p95", c["cancel_idle_p95_s"], "s", TARGETS["cancel_idle_p95_s"], c["samples"]],
                 ["llama-server time per token (same prompts), p50", c["server_token_interval_p50_s"],
                  "s", None, c["samples"]]]
    w = result.get("warm")
    if w:
        rows += [[f"request during a warm (steps of {w['warm_step_tokens']}): extra wait p50",
                  w["wait_stepped_p50_s"], "s", None, w["samples"]],
                 ["  the same, max", w["wait_stepped_max_s"], "s", None, w["samples"]],
                 ["  extra wait / that sample's warm step, p50", w["warm_wait_over_step_p50"], "",
                  TARGETS["warm_wait_over_step_p50"], w["samples"]],
                 ["  the same, max", w["warm_wait_over_step_max"], "", TARGETS["warm_wait_over_step_p50"],
                  w["samples"]],
                 ["request during a whole-prompt warm: extra wait p50", w["wait_whole_p50_s"], "s",
                  None, w["samples"]],
                 ["  the same, max", w["wait_whole_max_s"], "s", None, w["samples"]],
                 ["cold request alone, first text p50", w["alone_p50_s"], "s", None, w["samples"]],
                 ["the warm's first step sent cold, p50", w["warm_step_p50_s"], "s", None, w["samples"]],
                 ["one generated token, p50", w["token_p50_s"], "s", None, w["samples"]]]
    if f:
        rows += [["requests answered exactly once", f"{f['answered']}/{f['requests']}", "", None, f["requests"]],
                 ["documents moved while their server lived",
                  len(f["documents_that_moved_while_their_server_lived"]), "", 0, None]]
    return ("# specfill bench remote\n\n" + markdown_table(["metric", "value", "unit", "target", "samples"], rows)
            + (f"\n\nfailover outcomes: {f['outcomes']}; killed {f['killed']} at request "
               f"{f['killed_at_request']}\n" if f else "\n"))
