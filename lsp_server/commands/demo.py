"""`python -m lsp_server.commands.demo`: the real server over stdio, one file, one cursor.

Starts `specfill serve --stdio` on the default model pair, opens examples/inventory.py,
asks for an inline completion inside `Inventory.total_value`, prints the streamed text as
it grows, the completion in place, and the server's own statistics. Then it types the
completion's first character and asks again, to show the warm KV cache: the second
request prefills only the tokens after the edit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from lsp_server.client import Message, SpecfillClient, StreamEvent, utf16_len

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inventory.py"
LANGUAGES = {".py": "python", ".js": "javascript", ".ts": "typescript", ".go": "go",
             ".rs": "rust", ".java": "java", ".c": "c", ".cpp": "cpp"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lsp_server.commands.demo", description=__doc__.splitlines()[0])
    p.add_argument("--file", type=Path, default=EXAMPLE)
    p.add_argument("--line", type=int, default=27, help="0-based line of the cursor")
    p.add_argument("--col", type=int, default=8, help="0-based column (UTF-16 units)")
    p.add_argument("--target", help="target model (registry name, HF directory or .gguf)")
    p.add_argument("--draft", help="draft model")
    p.add_argument("--dtype", help="auto | bf16 | fp16 | fp32")
    p.add_argument("--quant", help="both models' weights (model.quant, model.draftQuant): auto | gguf | bf16")
    p.add_argument("--max-new-tokens", type=int, default=0, help="0 = the syntax policy's budget")
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for the models")
    return p.parse_args(argv)


def server_options(args: argparse.Namespace) -> dict[str, Any]:
    model = {k: v for k, v in (("target", args.target), ("draft", args.draft), ("dtype", args.dtype),
                               ("quant", args.quant), ("draftQuant", args.quant)) if v}
    options: dict[str, Any] = {"model": model} if model else {}
    if args.max_new_tokens:
        options["maxNewTokens"] = args.max_new_tokens
    return options


# -- presentation (pure) ----------------------------------------------------------

def _color(enabled: bool):
    def paint(text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if enabled and text else text
    return paint


paint = _color(sys.stdout.isatty() and "NO_COLOR" not in os.environ)


def update_line(elapsed_s: float, text: str, width: int = 88) -> str:
    """One streamed update: time since the request and the text so far, on one line
    (newlines shown as ⏎; a long text shows its growing end)."""
    shown = text.replace("\n", "⏎")
    if len(shown) > width:
        shown = "…" + shown[-(width - 1):]
    return f"  {elapsed_s:6.2f} s  {len(text):4d} chars  {shown}"


def in_context(source: str, line: int, col: int, completion: str,
               before: int = 4, after: int = 3) -> list[str]:
    """The lines around the cursor with the completion inserted, numbered 1-based; the
    inserted text is highlighted. `col` is in UTF-16 units."""
    lines = source.splitlines()
    while len(lines) <= line:
        lines.append("")
    head = lines[line]
    cut = _utf16_to_index(head, col)
    new = (head[:cut] + "\x00" + completion + "\x01" + head[cut:]).split("\n")
    first = max(0, line - before)
    numbered = lines[first:line] + new + lines[line + 1: line + 1 + after]
    changed = range(line - first, line - first + len(new))
    out, inside = [], False
    for i, text in enumerate(numbered):
        rendered, inside = _highlight(text, inside)
        gutter = "+" if i in changed else " "  # marks the inserted lines without colour too
        out.append(f"  {first + i + 1:4d} {gutter}| {rendered}")
    return out


def _highlight(text: str, inside: bool) -> tuple[str, bool]:
    """Paint what lies between the \\x00 and \\x01 markers (which may span lines)."""
    parts, out = text.replace("\x01", "\x00").split("\x00"), []
    for j, part in enumerate(parts):
        if j > 0:
            inside = not inside
        out.append(paint(part, "1;32") if inside else part)
    return "".join(out), inside


def _utf16_to_index(text: str, col: int) -> int:
    units = 0
    for i, ch in enumerate(text):
        if units >= col:
            return i
        units += utf16_len(ch)
    return len(text)


def stats_lines(last: dict[str, Any]) -> list[str]:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1000:.0f} ms"

    out = [
        f"  context                 {last.get('context')}  (stop: {last.get('stop_reason')})",
        f"  generated tokens        {last['generated_tokens']} in {last['rounds']} rounds "
        f"({last['speculative_rounds']} speculative, {last['plain_rounds']} plain)",
    ]
    for name, d in sorted(last.get("drafters", {}).items()):
        out.append(f"  drafter {name:<15} drafted {d['drafted']}, accepted {d['accepted']} "
                   f"({d['acceptance_rate']:.0%})")
    out += [
        f"  acceptance rate         {last['acceptance_rate']:.0%} "
        f"({last['accepted']} of {last['drafted']} drafted)",
        f"  mean accepted per round {last['mean_accepted_per_round']:.2f}",
        f"  time to first token     {ms(last.get('ttft_s'))} (engine)",
        f"  tokens/s                {last['tokens_per_s']:.1f}",
        f"  prefilled tokens        {last['prefilled_tokens']} of {last['prompt_tokens']} prompt tokens",
    ]
    out.append(f"  time drafting / verify  {ms(last.get('draft_s'))} / {ms(last.get('verify_s'))} "
               "(`specfill doctor` measures the speedup on this machine)")
    return out


# -- the run ------------------------------------------------------------------------

def _print_message(message: Message) -> None:
    if message.kind == "show" or "loading" in message.text or "ready" in message.text:
        print(paint(f"  [server] {message.text}", "2"), flush=True)


async def _request(client: SpecfillClient, uri: str, line: int, col: int) -> tuple[str, dict]:
    sent = time.monotonic()

    def show(event: StreamEvent) -> None:
        if not event.done:
            print(update_line(event.t - sent, event.text), flush=True)

    text, timings = await client.complete(uri, line, col, on_update=show)
    first = timings.first_text_s
    print(f"  answered after {timings.final_s:.2f} s"
          + (f"; first streamed text after {first:.2f} s" if first is not None else "")
          + f"; {sum(not u.done for u in timings.updates)} streamed updates")
    last = (await client.stats()).get("last") or {}
    return text, last


async def run_demo(args: argparse.Namespace) -> int:
    path = args.file.resolve()
    if not path.is_file():
        print(f"error: no such file: {path}", file=sys.stderr)
        return 2
    source = path.read_text(encoding="utf-8")
    uri = path.as_uri()
    language = LANGUAGES.get(path.suffix, "plaintext")
    print(paint("specfill demo", "1") + f": {path.name}, cursor at {args.line}:{args.col} (0-based)")
    async with SpecfillClient(server_options(args), on_message=_print_message) as client:
        print("  starting the server and loading the models ...", flush=True)
        t0 = time.monotonic()
        try:
            await client.wait_ready(args.ready_timeout)
        except (RuntimeError, TimeoutError) as exc:
            print(f"error: {exc}\nRun `specfill models fetch` (or `make models`), then try again.",
                  file=sys.stderr)
            return 1
        print(f"  models ready after {time.monotonic() - t0:.1f} s\n")
        client.open(uri, language, source)

        print(paint("1. inline completion, streamed", "1"))
        text, last = await _request(client, uri, args.line, args.col)
        if not text:
            print("  (no completion here)")
            return 0
        print(paint("\n2. the completion in place", "1"))
        print("\n".join(in_context(source, args.line, args.col, text)))
        print(paint("\n3. what the engine did (specfill/stats, last request)", "1"))
        print("\n".join(stats_lines(last)))

        typed = text[0] if text[0] not in "\r\n" else "r"
        print(paint(f"\n4. type {typed!r} and ask again: the KV cache is warm", "1"))
        client.insert(uri, 2, args.line, args.col, typed)
        _, warm = await _request(client, uri, args.line, args.col + utf16_len(typed))
        for label, s in (("first request", last), (f"after typing {typed!r}", warm)):
            if s:
                print(f"  {label:<22} prefilled {s['prefilled_tokens']:5d} of "
                      f"{s['prompt_tokens']} prompt tokens, first token after "
                      f"{(s.get('ttft_s') or 0) * 1000:.0f} ms (engine)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(run_demo(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
