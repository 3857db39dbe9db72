"""`specfill bench lsp`: the real server over stdio, driven like an editor while typing.

A real source file is opened with the last lines of one function's body deleted; then
those lines are typed back one keystroke at a time (a newline keystroke auto-indents, as
editors do). After each keystroke the client sends an incremental didChange and, after a
debounce, an inlineCompletion; a keystroke inside the debounce window drops the pending
request unsent, and a request still running when the next keystroke arrives is cancelled
with $/cancelRequest. The typist pauses after words and lines and waits for the
completion to finish, so completions do complete.

Measured on the client: request -> first streamed text (the cold first request on the
file vs warm later ones), request -> final answer, cancel -> worker idle (the server's
own abort latencies, plus client polling of `specfill/stats`), prefilled tokens per
request, completions per second of typing. Output: DIR/results.json (`summary` first,
then raw events), DIR/results.md, DIR/latency.png.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import random
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence


from lsp_server.bench import open_session
from lsp_server.bench.report import machine_info, markdown_table, plain_args, write_json
from lsp_server.client import RequestCancelled, SpecfillClient, completion_text, utf16_len
from lsp_server.context.prompt import FIM_MODES
from lsp_server.engine.types import percentile

# glob.py of the running Python: 8.7 KB, about 2,000 tokens for the Qwen2.5 tokenizer.
DEFAULT_STDLIB_FILE = "glob.py"
# From the issue; reported, never asserted. The first-token target is for answers that needed
# a model call: one typed through an earlier answer shows its text without any.
TARGETS = {"first_token_model_p50_s": 0.300, "cancel_idle_p95_s": 0.250}
# Where an answer's first text came from (answer_source); "unattributed": no server stats could
# be tied to the request (cancelled, or another answer finished between two looks).
SOURCES = ("model", "generation", "background", "unattributed")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--file", default=None,
                   help=f"Python source to type into (default: the stdlib's {DEFAULT_STDLIB_FILE})")
    p.add_argument("--out", default="bench-results/lsp")
    p.add_argument("--chars", type=int, default=100,
                   help="about this many keystrokes: whole trailing statements of one function")
    p.add_argument("--debounce-ms", type=float, default=150.0)
    p.add_argument("--cps", type=float, default=8.0, help="typing speed, characters per second")
    p.add_argument("--pause-at", choices=["word", "line", "end"], default="word",
                   help="where the typist stops and waits for the completion")
    p.add_argument("--pause-timeout-s", type=float, default=30.0,
                   help="a paused completion running longer is cancelled (outcome: timeout)")
    p.add_argument("--seed", type=int, default=0, help="seeds the keystroke intervals")
    p.add_argument("--target", default=None)
    p.add_argument("--draft", default=None)
    p.add_argument("--quant", default=None, help="target weights (model.quant; default: the server's)")
    p.add_argument("--draft-quant", default=None, help="draft weights (model.draftQuant)")
    p.add_argument("--dtype", default=None)
    p.add_argument("--threads", type=int, default=0, help="server torch threads (0 = default)")
    p.add_argument("--max-new-tokens", type=int, default=0, help="0 = the syntax policy's budget")
    p.add_argument("--ready-timeout-s", type=float, default=600.0)
    p.add_argument("--suffix-tokens", type=int, default=None,
                   help="contextWindow.suffixTokens (default: the server's); every keystroke re-prefills it")
    p.add_argument("--fim-mode", default=None, choices=FIM_MODES,
                   help="contextWindow.fimMode (default: the server's)")
    p.add_argument("--backend", default="local", choices=["local", "openai", "llama-server", "ollama"],
                   help="backend.kind: the same trace against the local engine or a serving engine")
    p.add_argument("--backend-url", action="append", default=[],
                   help="backend.urls (repeat for several), e.g. http://127.0.0.1:8080")
    p.add_argument("--backend-model", default="", help="backend.model (openai, ollama)")
    p.add_argument("--session", choices=["typing", "accept", "open"], default="typing",
                   help="typing: type a function body back; accept: type through suggestions "
                        "and accept them (bench/accept_session.py)")
    p.add_argument("--spots", type=int, default=8, help="--session accept: statements to complete")
    p.add_argument("--typed-chars", type=int, default=3,
                   help="--session accept: characters of each suggestion typed before accepting")
    p.add_argument("--read-s", type=float, default=3.0,
                   help="--session accept: pause reading a suggestion before accepting it")
    open_session.add_arguments(p)


# -- the text to type (pure) --------------------------------------------------------

@dataclass(frozen=True)
class Spot:
    """Lines [start, end) of `function`'s body: deleted, then typed back."""

    function: str
    start: int  # 0-based line
    end: int
    lines: tuple[str, ...]  # the original lines, without their line ends

    @property
    def indent(self) -> str:
        first = self.lines[0]
        return first[: len(first) - len(first.lstrip())]

    def keystrokes(self) -> list[str]:
        """One string per keystroke: each character of a line after its indentation, and
        between lines a newline that brings the next line's indentation (auto-indent)."""
        keys: list[str] = []
        for i, line in enumerate(self.lines):
            body = line.lstrip(" \t")
            if i > 0:
                keys.append("\n" + line[: len(line) - len(body)])
            keys.extend(body)
        return keys


def find_spot(source: str, chars: int) -> Spot:
    """The trailing statements of a function body closest to `chars` keystrokes, preferring
    functions in the second half of the file (a long prefix, as in a real edit).
    Deterministic for a given source."""
    lines = source.splitlines()
    candidates: list[tuple[tuple, Spot]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
            body = body[1:]  # keep the docstring: it is context, not typing
        end = node.end_lineno or node.lineno
        for stmt in reversed(body):
            spot = Spot(node.name, stmt.lineno - 1, end, tuple(lines[stmt.lineno - 1: end]))
            n = len(spot.keystrokes())
            late = spot.start >= len(lines) // 2
            candidates.append(((not late, abs(n - chars), -spot.start), spot))
            if n >= chars:
                break
    if not candidates:
        raise ValueError("no function body to type into: choose a Python file with functions")
    return min(candidates, key=lambda c: c[0])[1]


def document_without(source: str, spot: Spot) -> str:
    """The source with the spot's lines replaced by one line holding their indentation."""
    lines = source.splitlines(keepends=True)
    return "".join(lines[: spot.start]) + spot.indent + "\n" + "".join(lines[spot.end:])


def keystroke_gaps(n: int, cps: float, seed: int) -> list[float]:
    """Seconds before each keystroke: uneven like a person, mean about 1/cps."""
    rng = random.Random(seed)
    return [rng.uniform(0.5, 1.55) / cps for _ in range(n)]


def is_pause(key: str, next_key: str | None, pause_at: str) -> bool:
    if next_key is None:
        return True
    if pause_at == "end":
        return False
    if key.startswith("\n"):
        return True
    return pause_at == "word" and key == " " and next_key != " "


# -- the summary (pure) ---------------------------------------------------------------

def _pct(values: Sequence[float], q: float) -> float | None:
    return percentile(sorted(v for v in values if v is not None), q)


def answer_source(engine: dict) -> str:
    """Where an answer's first text came from, by the server's stats for that request: "model"
    (a model call made it), "generation" (typed through an earlier answer: its tokens were
    known), "background" (a precompute made it); "unattributed" without stats."""
    if not engine:
        return "unattributed"
    if not engine.get("known_tokens"):
        return "model"
    return engine.get("known_source") or "generation"


def by_source(events: Sequence[dict]) -> dict[str, Any]:
    """First-text latency of warm answers, model calls apart from answers served from earlier
    work (the two differ by orders of magnitude; one median over both says little)."""
    warm = [e for e in events if not e["cold"] and e["first_token_s"] is not None]
    model = [e["first_token_s"] for e in warm if e.get("answer_source") == "model"]
    reused = [e["first_token_s"] for e in warm if e.get("answer_source") in ("generation", "background")]
    counts = {s: sum(e.get("answer_source", "unattributed") == s for e in warm) for s in SOURCES}
    return {"first_token_model_p50_s": _pct(model, 50), "first_token_model_p95_s": _pct(model, 95),
            "first_token_reused_p50_s": _pct(reused, 50), "warm_first_text_by_source": counts}


def summarize(events: Sequence[dict], abort_latencies_s: Sequence[float],
              typing_s: float) -> dict[str, Any]:
    """Latency percentiles (nearest rank) over the request events. Each event has `cold`,
    `outcome` (completed | empty | cancelled | error | timeout), `first_token_s` (None when
    no text arrived before the answer or the cancel), `final_s`, `prefilled_tokens` and
    `cancel_idle_s` (client-observed, None when not seen)."""
    cold = [e for e in events if e["cold"]]
    warm = [e for e in events if not e["cold"]]
    first_warm = [e["first_token_s"] for e in warm if e["first_token_s"] is not None]
    first_cold = [e["first_token_s"] for e in cold if e["first_token_s"] is not None]
    finals = [e["final_s"] for e in warm if e["outcome"] in ("completed", "empty")]
    prefilled = [e["prefilled_tokens"] for e in warm if e.get("prefilled_tokens") is not None]
    client_idle = [e["cancel_idle_s"] for e in events if e.get("cancel_idle_s") is not None]
    done = sum(e["outcome"] == "completed" for e in warm)
    outcomes: dict[str, int] = {}
    for e in events:
        outcomes[e["outcome"]] = outcomes.get(e["outcome"], 0) + 1
    return {
        "first_token_warm_p50_s": _pct(first_warm, 50),
        "first_token_warm_p95_s": _pct(first_warm, 95),
        "first_token_cold_p50_s": _pct(first_cold, 50),
        "final_p50_s": _pct(finals, 50),
        "final_p95_s": _pct(finals, 95),
        "cancel_idle_p50_s": _pct(abort_latencies_s, 50),
        "cancel_idle_p95_s": _pct(abort_latencies_s, 95),
        "cancel_idle_client_p50_s": _pct(client_idle, 50),
        "cancel_idle_client_p95_s": _pct(client_idle, 95),
        "prefilled_tokens_p50": _pct(prefilled, 50),
        "completions_per_s_typing": done / typing_s if typing_s > 0 else None,
        "requests": len(events),
        "outcomes": outcomes,
        "samples": {"first_token_warm": len(first_warm), "first_token_cold": len(first_cold),
                    "final": len(finals), "cancel_idle": len(abort_latencies_s),
                    "cancel_idle_client": len(client_idle), "prefilled": len(prefilled)},
        "cancelled": outcomes.get("cancelled", 0),
        "cancelled_before_first_token": sum(
            e["outcome"] == "cancelled" and e["first_token_s"] is None for e in events),
        "typing_s": typing_s,
        **by_source(events),
    }


# -- the editor -------------------------------------------------------------------

@dataclass
class Request:
    id: str
    cold: bool
    line: int
    character: int
    version: int
    sent: float
    answered: float | None = None
    outcome: str = "pending"
    cancelled_at: float | None = None
    idle_seen_at: float | None = None
    paused: bool = False  # the typist waited for this one
    text: str = ""
    engine: dict = field(default_factory=dict)  # from specfill/stats "last"

    def to_event(self, stream: Sequence[Any], t0: float) -> dict[str, Any]:
        horizon = self.cancelled_at if self.cancelled_at is not None else float("inf")
        first = next((u.t for u in stream if u.text.strip() and u.t <= horizon), None)
        return {
            "id": self.id, "cold": self.cold, "paused": self.paused, "outcome": self.outcome,
            "line": self.line, "character": self.character, "version": self.version,
            "sent_at_s": self.sent - t0,
            "first_token_s": None if first is None else first - self.sent,
            "final_s": None if self.answered is None else self.answered - self.sent,
            "cancel_idle_s": (None if self.idle_seen_at is None or self.cancelled_at is None
                              else self.idle_seen_at - self.cancelled_at),
            "streamed_updates": sum(not u.done for u in stream),
            "prefilled_tokens": self.engine.get("prefilled_tokens"),
            "prompt_tokens": self.engine.get("prompt_tokens"),
            "generated_tokens": self.engine.get("generated_tokens"),
            "engine_ttft_s": self.engine.get("ttft_s"),
            "answer_source": answer_source(self.engine),
            "known_tokens": self.engine.get("known_tokens"),
            "text": self.text,
        }


class Editor:
    """Debounced completion requests over one document, cancelled by the next keystroke."""

    def __init__(self, client: SpecfillClient, uri: str, debounce_s: float):
        self.client = client
        self.uri = uri
        self.debounce_s = debounce_s
        self.version = 1
        self.requests: list[Request] = []
        self.debounced = 0  # keystrokes whose request never left: typed over in the window
        self._timer: asyncio.Task | None = None
        self._inflight: tuple[Request, asyncio.Task] | None = None
        self._tasks: set[asyncio.Task] = set()
        self._finished_seen = 0

    async def start(self, line: int, character: int) -> None:
        s = await self.client.stats()
        self._finished_seen = s["totals"]["completions"] + s["totals"]["empty"]
        self._send(line, character, cold=True)

    def keystroke(self, line: int, character: int, text: str, cursor: tuple[int, int]) -> None:
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()
            self.debounced += 1
        if self._inflight is not None and not self._inflight[1].done():
            self._cancel(self._inflight[0])
        self.version += 1
        self.client.insert(self.uri, self.version, line, character, text)
        self._timer = asyncio.create_task(self._fire_after(*cursor))

    async def settle(self, timeout_s: float) -> None:
        """Wait for the pending request to be sent and answered (the typist pauses)."""
        if self._timer is not None:
            await asyncio.gather(self._timer, return_exceptions=True)
        if self._inflight is None or self._inflight[1].done():
            return
        request, task = self._inflight
        request.paused = True
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except asyncio.TimeoutError:
            self._cancel(request)
            await task
            if request.outcome == "cancelled":
                request.outcome = "timeout"

    def progress(self) -> str:
        """One line for the console while the run goes on."""
        outcomes = [r.outcome for r in self.requests]
        last = self.requests[-1] if self.requests else None
        shown = f", last answer {last.outcome} after {last.answered - last.sent:.2f} s" if (
            last is not None and last.answered is not None) else ""
        return (f"{len(outcomes)} requests ({outcomes.count('completed')} completed, "
                f"{outcomes.count('cancelled')} cancelled){shown}")

    async def close(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- internals ----------------------------------------------------------------

    async def _fire_after(self, line: int, character: int) -> None:
        await asyncio.sleep(self.debounce_s)
        self._send(line, character, cold=False)

    def _send(self, line: int, character: int, cold: bool) -> None:
        request = Request(self.client.next_id(), cold, line, character, self.version, time.monotonic())
        self.requests.append(request)
        future = self.client.send_completion(self.uri, line, character, request.id, invoked=cold)
        self._inflight = (request, self._spawn(self._await(request, future)))

    async def _await(self, request: Request, future: asyncio.Future) -> None:
        try:
            request.text = completion_text(await future)
            request.outcome = "completed" if request.text else "empty"
        except RequestCancelled:
            request.outcome = "cancelled"
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            request.outcome = f"error: {exc}"
        request.answered = time.monotonic()
        if request.outcome in ("completed", "empty"):
            await self._collect_engine_stats(request)

    async def _collect_engine_stats(self, request: Request) -> None:
        """The server's `last` stats belong to this request when exactly one more
        completion finished since the previous look."""
        s = await self.client.stats()
        finished = s["totals"]["completions"] + s["totals"]["empty"]
        if finished == self._finished_seen + 1 and s.get("last"):
            request.engine = s["last"]
        self._finished_seen = finished

    def _cancel(self, request: Request) -> None:
        request.cancelled_at = time.monotonic()
        self.client.cancel(request.id)
        self._spawn(self._watch_idle(request, len(self.requests)))

    async def _watch_idle(self, request: Request, sent: int, poll_s: float = 0.02) -> None:
        """Client view of cancel -> idle; unknown once a newer request may keep it busy."""
        while time.monotonic() - (request.cancelled_at or 0.0) < 30.0:
            if (await self.client.stats())["engine"]["idle"]:
                request.idle_seen_at = time.monotonic()
                return
            if len(self.requests) != sent:
                return
            await asyncio.sleep(poll_s)

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


async def type_spot(editor: Editor, spot: Spot, gaps: Sequence[float], pause_at: str,
                    pause_timeout_s: float) -> float:
    """Type the spot's keystrokes; returns the seconds from the first keystroke to the
    end of the last pause."""
    line, col = spot.start, utf16_len(spot.indent)
    keys = spot.keystrokes()
    t0 = time.monotonic()
    for i, key in enumerate(keys):
        await asyncio.sleep(gaps[i])
        if key.startswith("\n"):
            after = (line + 1, utf16_len(key[1:]))
        else:
            after = (line, col + utf16_len(key))
        editor.keystroke(line, col, key, after)
        line, col = after
        if is_pause(key, keys[i + 1] if i + 1 < len(keys) else None, pause_at):
            await editor.settle(pause_timeout_s)
            print(f"[lsp] {i + 1}/{len(keys)} keystrokes, {editor.progress()}", flush=True)
    return time.monotonic() - t0


# -- the run ------------------------------------------------------------------------

def default_file() -> Path:
    return Path(sysconfig.get_paths()["stdlib"]) / DEFAULT_STDLIB_FILE


def server_options(args: argparse.Namespace) -> dict[str, Any]:
    model = {k: v for k, v in (("target", args.target), ("draft", args.draft),
                               ("dtype", args.dtype), ("threads", args.threads),
                               ("quant", args.quant), ("draftQuant", args.draft_quant)) if v}
    options: dict[str, Any] = {"model": model} if model else {}
    if args.max_new_tokens:
        options["maxNewTokens"] = args.max_new_tokens
    window = {k: v for k, v in (("suffixTokens", args.suffix_tokens), ("fimMode", args.fim_mode)) if v is not None}
    if window:
        options["contextWindow"] = window
    if getattr(args, "backend", "local") != "local":
        options["backend"] = {"kind": args.backend, "urls": args.backend_url,
                              "model": args.backend_model}
    return options


async def drive(args: argparse.Namespace, path: Path, spot: Spot, out_dir: Path) -> dict[str, Any]:
    source = path.read_text(encoding="utf-8")
    uri = path.resolve().as_uri()
    gaps = keystroke_gaps(len(spot.keystrokes()), args.cps, args.seed)
    async with SpecfillClient(server_options(args), stderr_log=out_dir / "server.log") as client:
        t_start = time.monotonic()
        await client.wait_ready(args.ready_timeout_s)
        load_s = time.monotonic() - t_start
        print(f"[lsp] models ready after {load_s:.1f} s", flush=True)
        client.open(uri, "python", document_without(source, spot))
        editor = Editor(client, uri, args.debounce_ms / 1000)
        t0 = time.monotonic()
        await editor.start(spot.start, utf16_len(spot.indent))
        await editor.settle(args.pause_timeout_s)
        print(f"[lsp] cold request: {editor.requests[0].outcome} after "
              f"{(editor.requests[0].answered or t0) - t0:.2f} s; typing {len(gaps)} keystrokes",
              flush=True)
        typing_s = await type_spot(editor, spot, gaps, args.pause_at, args.pause_timeout_s)
        await editor.close()
        final = await client.stats()
        events = [r.to_event(client.streams.get(r.id, []), t0) for r in editor.requests]
    return {"events": events, "typing_s": typing_s, "load_s": load_s, "server_stats": final,
            "debounced_keystrokes": editor.debounced,
            "abort_latencies_s": final["engine"]["abort_latencies_s"]}


def run(args: argparse.Namespace) -> int:
    path = Path(args.file) if args.file else default_file()
    if not path.is_file():
        raise SystemExit(f"no such file: {path}")
    if args.session == "open":
        return open_session.run(args)
    if args.session == "accept":
        from lsp_server.bench import accept_session

        return accept_session.run(args, path, server_options(args))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    spot = find_spot(path.read_text(encoding="utf-8"), args.chars)
    print(f"[lsp] {path}: typing {len(spot.keystrokes())} keystrokes back into {spot.function}() "
          f"at lines {spot.start + 1}-{spot.end}", flush=True)
    machine = machine_info()
    try:
        raw = asyncio.run(drive(args, path, spot, out_dir))
    except (RuntimeError, TimeoutError) as exc:
        print(f"error: {exc}\nRun `specfill models fetch` or check --target/--draft; "
              f"the server's log is in {out_dir / 'server.log'}.", file=sys.stderr)
        return 1
    summary = summarize(raw["events"], raw["abort_latencies_s"], raw["typing_s"])
    summary["debounced_keystrokes"] = raw["debounced_keystrokes"]
    summary["keystrokes"] = len(spot.keystrokes())
    result = {"summary": summary, "targets": TARGETS, "machine": machine, "args": plain_args(args),
              "file": str(path), "spot": asdict(spot), "load_s": raw["load_s"],
              "events": raw["events"], "abort_latencies_s": raw["abort_latencies_s"],
              "server_stats": raw["server_stats"]}
    write_json(out_dir / "results.json", result)
    write_report(out_dir, summary, raw["events"], raw["abort_latencies_s"], path, spot, args)
    print((out_dir / "results.md").read_text())
    return 0


def write_report(out_dir: Path, summary: dict, events: list[dict], aborts: Sequence[float],
                 path: Path, spot: Spot, args: argparse.Namespace) -> None:
    def row(label: str, key: str, unit: str = "s") -> list[Any]:
        value, target = summary.get(key), TARGETS.get(key)
        met = None if target is None or value is None else ("yes" if value <= target else "no")
        return [label, value, unit, target, met]

    table = markdown_table(["metric", "value", "unit", "target", "met"], [
        row("first streamed text, warm, a model call made it, p50", "first_token_model_p50_s"),
        row("first streamed text, warm, a model call made it, p95", "first_token_model_p95_s"),
        row("first streamed text, warm, served from earlier work, p50", "first_token_reused_p50_s"),
        row("first streamed text, warm, all, p50", "first_token_warm_p50_s"),
        row("first streamed token, cold (first request)", "first_token_cold_p50_s"),
        row("final answer, warm, p50", "final_p50_s"),
        row("final answer, warm, p95", "final_p95_s"),
        row("cancel -> worker idle, p50 (server)", "cancel_idle_p50_s"),
        row("cancel -> worker idle, p95 (server)", "cancel_idle_p95_s"),
        row("cancel -> idle seen by the client, p50", "cancel_idle_client_p50_s"),
        row("prefilled tokens per warm request, p50", "prefilled_tokens_p50", "tokens"),
        row("completions per second of typing", "completions_per_s_typing", "1/s"),
    ])
    header = (f"# specfill bench lsp\n\n{path.name}: {summary['keystrokes']} keystrokes typed back "
              f"into `{spot.function}()` (lines {spot.start + 1}-{spot.end}) at {args.cps:g} chars/s, "
              f"debounce {args.debounce_ms:g} ms, pauses at each {args.pause_at}. "
              f"{summary['requests']} requests ({summary['outcomes']}), "
              f"{summary['cancelled']} cancelled ({summary['cancelled_before_first_token']} before any text), "
              f"{summary['debounced_keystrokes']} keystrokes debounced, "
              f"samples {summary['samples']}. Warm first text by source (model call, typed through an "
              f"earlier answer, precompute, not tied to stats): {summary['warm_first_text_by_source']}.\n\n")
    (out_dir / "results.md").write_text(header + table)
    latency_plot(out_dir / "latency.png", {
        "first text\nmodel call": [e["first_token_s"] for e in events
                                  if not e["cold"] and e.get("answer_source") == "model"],
        "first text\nearlier work": [e["first_token_s"] for e in events if not e["cold"]
                                    and e.get("answer_source") in ("generation", "background")],
        "first token\ncold": [e["first_token_s"] for e in events if e["cold"]],
        "final\nwarm": [e["final_s"] for e in events
                        if not e["cold"] and e["outcome"] in ("completed", "empty")],
        "cancel -> idle\n(server)": list(aborts),
    }, TARGETS)


def latency_plot(path: Path, groups: dict[str, list[float | None]], targets: dict[str, float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(groups)
    data = [[v for v in groups[k] if v is not None] for k in labels]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.boxplot([d or [float("nan")] for d in data], showfliers=False)
    ax.set_xticks(range(1, len(labels) + 1), labels)
    rng = random.Random(0)
    for i, values in enumerate(data, start=1):  # every sample, jittered sideways
        ax.scatter([i + rng.uniform(-0.15, 0.15) for _ in values], values, s=12, alpha=0.6,
                   color="#4c72b0", zorder=3)
    ax.axhline(targets["first_token_model_p50_s"], color="#c44e52", ls="--", lw=1,
               label=f"target: first text of a model call p50 {targets['first_token_model_p50_s'] * 1000:.0f} ms")
    ax.axhline(targets["cancel_idle_p95_s"], color="#dd8452", ls=":", lw=1,
               label=f"target: cancel -> idle p95 {targets['cancel_idle_p95_s'] * 1000:.0f} ms")
    ax.set_yscale("log")
    ax.set_ylabel("seconds (log)")
    ax.set_title("specfill over LSP while typing: latency per request")
    ax.legend(loc="best", fontsize=8, framealpha=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
