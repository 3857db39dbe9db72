"""`specfill bench speculation`: what speculation gives the completions users get.

Two servers on the same models, `speculation.mode` `off` and `adaptive`, get the same
session step by step: each held-out spot (quality_spots) is opened, `specfill/warm` at the
cursor, the warm waited for, then the request; which server goes first alternates per spot,
and both are idle (precomputes ended) before either is asked. Why two servers and not one
switched per spot: a second request at the same spot is answered from the first one's
generation (engine/lineage.py), with no model call. Then an editing replay: a function of a
held-out file is written again right below itself under another name, a line at a time,
with a request at the start of each of its lines (the repetition editors see all day).

Time to the final answer is measured on the client; tokens, syntax context, rounds and the
drafts of each source come from `specfill/stats`. Outputs are compared: greedy speculation
must give the same text. speculation_report.py summarises against the issue's targets.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from lsp_server.bench.accept_session import wait_warmed, _warms_done
from lsp_server.bench.quality_spots import PACKAGES, QualitySpot, candidate_files, cut_spots
from lsp_server.bench.report import machine_info, plain_args, write_json
from lsp_server.bench.speculation_report import report_text, summarize
from lsp_server.client import SpecfillClient, utf16_len

MODES = ("off", "adaptive")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spots", type=int, default=12, help="held-out spots (alternating line / block)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--replay-functions", type=int, default=2, help="functions written again below themselves")
    p.add_argument("--replay-lines", type=int, default=6, help="requests per replayed function (one a line)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--target", default=None)
    p.add_argument("--draft", default=None)
    p.add_argument("--request-timeout-s", type=float, default=120.0)
    p.add_argument("--ready-timeout-s", type=float, default=600.0)
    p.add_argument("--out", default="bench-results/speculation")
    p.add_argument("--report-from", default=None, metavar="JSON",
                   help="a run's speculation.json: report its requests again with this code's "
                        "summary and bounds; no server is started")


@dataclass(frozen=True)
class Step:
    """One request of the session: a document, a cursor, and what it belongs to."""

    group: str  # "spot" or "replay"
    uri: str
    text: str
    line: int
    column: int  # UTF-16
    label: str


def spot_step(spot: QualitySpot) -> Step:
    column = utf16_len(spot.prefix[spot.prefix.rfind("\n") + 1:])
    return Step("spot", Path(spot.path).as_uri(), spot.document, spot.line, column,
                f"{spot.kind} {Path(spot.path).name}:{spot.line + 1}")


def replay_steps(path: Path, text: str, lines_wanted: int) -> list[Step]:
    """The function of `text` best suited to a replay (the first with 4-16 body lines),
    written again below itself renamed: a step at each of its first body lines, the copy's
    header and the lines above already typed."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = text.split("\n")
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list:
            continue
        first, start, last = node.lineno - 1, node.body[0].lineno - 1, (node.end_lineno or node.lineno) - 1
        body = lines[start:last + 1]
        if not 4 <= len(body) <= 16 or f"def {node.name}" not in lines[first]:
            continue
        header = [lines[first].replace(f"def {node.name}", f"def {node.name}_again", 1), *lines[first + 1:start]]
        above, below = lines[:last + 1] + ["", *header], lines[last + 1:]
        steps = []
        for j, line in enumerate(body[:lines_wanted]):
            indent = line[:len(line) - len(line.lstrip())]
            if not line.strip():
                continue
            doc = "\n".join(above + body[:j] + [indent] + below)
            steps.append(Step("replay", path.as_uri(), doc, len(above) + j, utf16_len(indent),
                              f"replay {path.name}:{node.name} line {j + 1}"))
        return steps
    return []


def replay_files(count: int, seed: int, lines_wanted: int, skip: set[str]) -> list[list[Step]]:
    import random

    out = []
    for path, _root in candidate_files(PACKAGES, random.Random(seed + 1)):
        if len(out) >= count:
            break
        if str(path) in skip:
            continue
        steps = replay_steps(path, path.read_text(encoding="utf-8", errors="replace"), lines_wanted)
        if len(steps) >= 3:
            out.append(steps)
    return out


async def ask(client: SpecfillClient, step: Step, timeout_s: float) -> dict[str, Any]:
    """Open the step's document, rest the cursor (warm) until the warm ends, then ask."""
    before = _warms_done(await client.stats())
    client.open(step.uri, "python", step.text)
    client.warm(step.uri, step.line, step.column)
    await wait_warmed(client, before, timeout_s)
    row: dict[str, Any] = {"timeout": False}
    try:
        text, timings = await asyncio.wait_for(client.complete(step.uri, step.line, step.column), timeout_s)
        last = (await client.stats())["last"] or {}
        row.update(completion=text, final_s=timings.final_s, first_text_s=timings.first_text_s,
                   **{k: last.get(k) for k in ("context", "generated_tokens", "prefilled_tokens",
                                                 "rounds", "speculative_rounds", "itl_p50_s",
                                                 "drafters", "known_tokens", "draft_skipped", "draft_catch_up",
                                                 "catch_ups_skipped", "k_trace", "prefill_s", "draft_s",
                                                 "verify_s")})
    except asyncio.TimeoutError:
        row["timeout"] = True
    client.close(step.uri)
    return row


async def run_step(clients: dict[str, SpecfillClient], step: Step, index: int,
                   timeout_s: float) -> dict[str, Any]:
    order = MODES if index % 2 == 0 else MODES[::-1]
    row: dict[str, Any] = {"group": step.group, "label": step.label, "first": order[0]}
    for mode in order:
        for client in clients.values():  # nobody's background work during the request
            await client.wait_idle(120.0)
        row[mode] = await ask(clients[mode], step, timeout_s)
    return row


async def drive(args: argparse.Namespace, steps: Sequence[Step], out_dir: Path) -> dict[str, Any]:
    model = {k: v for k, v in (("target", args.target), ("draft", args.draft),
                               ("threads", args.threads)) if v}
    clients = {mode: SpecfillClient({"speculation": {"mode": mode}, **({"model": model} if model else {})},
                                    stderr_log=out_dir / f"server-{mode}.log") for mode in MODES}
    for client in clients.values():  # one at a time: two loads at once fight for the cores
        await client.__aenter__()
        await client.wait_ready(args.ready_timeout_s)
    try:
        rows = []
        for i, step in enumerate(steps):
            t = time.monotonic()
            rows.append(await run_step(clients, step, i, args.request_timeout_s))
            print(f"[speculation] {i + 1}/{len(steps)} {step.label} in {time.monotonic() - t:.1f} s",
                  flush=True)
        stats = {mode: await client.stats() for mode, client in clients.items()}
        # what each server said while loading: the round costs it measured, the k cap
        load_log = {mode: [m.text for m in client.messages] for mode, client in clients.items()}
    finally:
        for client in clients.values():
            await client.shutdown()
    return {"rows": rows, "server_stats": stats, "load_log": load_log}


def run(args: argparse.Namespace) -> int:
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.report_from:  # the same requests, summed up again (the machine and run are the file's)
        saved = json.loads(Path(args.report_from).read_text())
        raw = {key: saved[key] for key in ("rows", "server_stats", "load_log")}
        machine, run_args, n_spots = saved["machine"], saved["args"], saved["args"]["spots"]
    else:
        spots = cut_spots(args.spots, args.seed, neighbours=0)
        steps = [spot_step(s) for s in spots]
        for replay in replay_files(args.replay_functions, args.seed, args.replay_lines, {s.path for s in spots}):
            steps += replay
        machine, run_args, n_spots = machine_info(), plain_args(args), len(spots)
        raw = asyncio.run(drive(args, steps, out_dir))
    summary = summarize(raw["rows"], raw["server_stats"]["adaptive"].get("round_costs"))
    write_json(out_dir / "speculation.json", {"summary": summary, "machine": machine,
                                              "args": run_args, **raw})
    text = report_text(summary, machine, n_spots)
    (out_dir / "speculation.md").write_text(text)
    print(text)
    return 0
