"""The llama.cpp side of `specfill bench peers`: every mode llama-server offers on the same
GGUF files, and llama-cpp-python's Python loop.

- llama-server (plain): llama.cpp's own C++ server, what llama.vscode and llama.vim users run,
  built by `make llama-server`, fed the same token ids over its streaming `/completion`.
- llama-server draft: the same with the draft model's GGUF (`-md`, `--spec-type
  draft-simple`, its own default draft length unless --llama-draft-max says otherwise).
- llama-server ngram-mod / ngram-simple: its n-gram speculation, no second model.
- llama.cpp plain / prompt-lookup: `llama_cpp.Llama` and its prompt-lookup drafter (needs
  llama-cpp-python, scripts/install-llama-cpp.sh).

A mode this build lacks (its `--help` lists the `--spec-type` values it takes) or one that
fails to start is not run, and its row says why; the other rows run.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

# llama-server modes: row name and the extra arguments (server-draft also gets -md <draft>).
SERVER_MODES = {
    "server": ("llama-server", ()),
    "server-draft": ("llama-server draft", ("--spec-type", "draft-simple")),
    "server-ngram-mod": ("llama-server ngram-mod", ("--spec-type", "ngram-mod")),
    "server-ngram-simple": ("llama-server ngram-simple", ("--spec-type", "ngram-simple")),
}
PYTHON_MODES = {"plain": "llama.cpp plain", "prompt-lookup": "llama.cpp prompt-lookup"}
LLAMA_MODES = (*SERVER_MODES, *PYTHON_MODES)
ROW_NAMES = {**{m: name for m, (name, _) in SERVER_MODES.items()}, **PYTHON_MODES}


def server_spec_types(binary: Path) -> set[str]:
    """The `--spec-type` values this llama-server build accepts, read off its `--help`."""
    from lsp_server.backends.llama_binary import llama_env

    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60,
                               env=llama_env()).stdout
    match = re.search(r"--spec-type\s+(\S+)", help_text)
    return set(re.split(r"[,|\[\]]", match.group(1))) - {""} if match else set()


def why_not(mode: str, spec_types: set[str] | None) -> str | None:
    """Why a llama.cpp mode can't run here, or None."""
    if mode in SERVER_MODES:
        from lsp_server.backends.llama_binary import llama_server_path

        if llama_server_path() is None:
            return "no llama-server built: run `make llama-server` (about 8 min)"
        extra = SERVER_MODES[mode][1]
        if extra and spec_types is not None and extra[1] not in spec_types:
            return f"this llama-server takes no --spec-type {extra[1]} (it takes {','.join(sorted(spec_types))})"
        return None
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed: run scripts/install-llama-cpp.sh (about 9 min)"
    return None


def timed_result(tokens: list[int], times: list[float], seconds: float, **extra: Any) -> dict[str, Any]:
    return {"tokens": tokens, "n": len(tokens), "seconds": seconds, "token_times_s": times,
            "ttft_s": times[0] if times else None,
            "tokens_per_s": len(tokens) / seconds if seconds else 0.0, **extra}


class LlamaRunner:
    """llama-cpp-python's generate loop, plain or with its prompt-lookup drafter."""

    def __init__(self, gguf: Path, n_ctx: int, threads: int, lookup_tokens: int | None):
        from llama_cpp import Llama

        draft = None
        if lookup_tokens:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = LlamaPromptLookupDecoding(num_pred_tokens=lookup_tokens)
        # logits_all with a drafter: without it, it crashes once prompt + output pass 512 tokens.
        self.llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                         logits_all=draft is not None, draft_model=draft, verbose=False)

    def run(self, ids: list[int], max_new: int, stop_ids: set[int]) -> dict[str, Any]:
        self.llm.reset()  # cold: no KV prefix carried over from the previous prompt
        out: list[int] = []
        times: list[float] = []
        t = time.perf_counter()
        tokens = self.llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0)
        for token in tokens:
            if token in stop_ids:
                break
            out.append(int(token))
            times.append(time.perf_counter() - t)
            if len(out) >= max_new:
                break
        tokens.close()
        return timed_result(out, times, time.perf_counter() - t)


class LlamaServerRunner:
    """A `llama-server` on loopback in one mode, fed token ids over streaming /completion."""

    def __init__(self, gguf: Path, n_ctx: int, threads: int, mode: str, draft: Path | None,
                 draft_max: int | None, log_path: Path):
        import atexit

        from lsp_server.backends.llama_binary import LlamaServerProcess

        extra = SERVER_MODES[mode][1]
        with_draft = mode == "server-draft"
        self.server = LlamaServerProcess(
            gguf, draft if with_draft else None, threads=threads, ctx=n_ctx, draft_max=draft_max,
            extra=() if with_draft else extra, log_path=log_path)
        atexit.register(self.server.stop)  # the benchmark's child: it must not outlive the run
        self.server.start()

    def run(self, ids: list[int], max_new: int, stop_ids: set[int]) -> dict[str, Any]:
        import httpx

        body = {"prompt": ids, "n_predict": max_new, "stream": True, "cache_prompt": False,
                "temperature": 0.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                "return_tokens": True, "samplers": ["top_k"]}
        out: list[int] = []
        times: list[float] = []
        timings: dict[str, Any] = {}
        ended: float | None = None  # when our output ended: a stop id or the budget
        t = time.perf_counter()
        with httpx.stream("POST", self.server.url + "/completion", json=body, timeout=120.0) as response:
            response.raise_for_status()
            # Read to the server's own stop (an end-of-generation token or n_predict): its last
            # chunk carries its draft counts. Tokens after a stop id are not ours, nor their time.
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                chunk = json.loads(line[len("data: "):])
                timings = chunk.get("timings") or timings
                for token in chunk.get("tokens") or []:
                    if ended is None and (token in stop_ids or len(out) >= max_new):
                        ended = time.perf_counter()
                    if ended is None:
                        out.append(int(token))
                        times.append(time.perf_counter() - t)
                if chunk.get("stop"):
                    break
        seconds = (ended or time.perf_counter()) - t
        return timed_result(out, times, seconds, **draft_counts(timings))

    def stop(self) -> None:
        self.server.stop()


def draft_counts(timings: dict[str, Any]) -> dict[str, Any]:
    """llama-server's own speculation counts from its last chunk's timings, when it drafted."""
    if not timings.get("draft_n"):
        return {}
    return {"stats": {"drafted": int(timings["draft_n"]), "accepted": int(timings.get("draft_n_accepted", 0))}}


def start_runner(mode: str, gguf: Path, draft: Path, n_ctx: int, threads: int, args: Any, out: Path) -> Any:
    if mode in SERVER_MODES:
        out.mkdir(parents=True, exist_ok=True)
        return LlamaServerRunner(gguf, n_ctx, threads, mode, draft, args.llama_draft_max or None,
                                 out / f"llama-{mode}.log")
    return LlamaRunner(gguf, n_ctx, threads, args.lookup_tokens if mode == "prompt-lookup" else None)


def llama_runners(args: Any, prompts: list[Any], ggufs: tuple[Path, Path], stop_ids: set[int], threads: int,
                  out: Path) -> tuple[dict[str, Callable[[Any], dict[str, Any]]], dict[str, str]]:
    """The runners that started, by row name, and why each other asked-for mode did not."""
    from lsp_server.backends.llama_binary import llama_server_path

    modes = [m for m in args.llama_modes.split(",") if m]
    unknown = set(modes) - set(LLAMA_MODES)
    if unknown:
        raise SystemExit(f"unknown llama.cpp modes: {', '.join(sorted(unknown))} (known: {', '.join(LLAMA_MODES)})")
    binary = llama_server_path()
    spec_types = server_spec_types(binary) if binary and any(m in SERVER_MODES for m in modes) else None
    n_ctx = max(len(p.ids) for p in prompts) + args.max_new_tokens + args.lookup_tokens + 16
    runners: dict[str, Callable[[Any], dict[str, Any]]] = {}
    not_run: dict[str, str] = {}
    for mode in modes:
        reason = why_not(mode, spec_types)
        try:
            if reason is None:
                llama = start_runner(mode, ggufs[0], ggufs[1], n_ctx, threads, args, out)
                llama.run(prompts[0].ids[:16], 2, stop_ids)  # warm-up: first-call allocations
                runners[ROW_NAMES[mode]] = lambda p, llama=llama: llama.run(p.ids, args.max_new_tokens, stop_ids)
        except Exception as exc:  # noqa: BLE001 - a mode that fails to start gets a row saying why
            reason = f"failed to start: {exc}"
        if reason is not None:
            print(f"not running {ROW_NAMES[mode]}: {reason}", flush=True)
            not_run[ROW_NAMES[mode]] = reason
    return runners, not_run
