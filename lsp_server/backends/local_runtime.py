"""Build the engine from the configuration. Runs on the worker thread (it loads torch)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from lsp_server.config import Config

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """What the server needs from a loaded engine: the engine itself, how to encode
    prompts, and the model's fill-in-the-middle token ids."""

    engine: Any  # lsp_server.engine.speculative.SpeculativeEngine
    encode: Callable[[str], list[int]]
    fim: Any  # lsp_server.context.prompt.FimTokens
    description: list[str]
    repo: Any = None  # lsp_server.context.cross_file.RepoTokens, None: no repo-level layout

    native: bool = False  # both models on specfill's native kernels (kernels.gguf)

    def generate(self, request: Any, should_abort: Callable[[], bool]):
        """The worker drives anything with this method."""
        return self.engine.generate(request, should_abort)

    def apply_threads(self, wanted: int | None) -> int:
        """Use `wanted` threads (None / 0: every core) for the matrix products; returns them."""
        return apply_threads(self.native, wanted)


NATIVE_SPIN_US = 2000


def apply_threads(native_models: bool, wanted: int | None) -> int:
    """With native models the kernels' own pool does the heavy work and torch runs the small
    ops on one thread: torch's OpenMP workers, spinning after each op, took the cores the
    kernels' workers needed (one-off, AMD EPYC, avx2 fma, 2 cores: a target step 227 ms with
    torch on 2 threads, 168 ms on 1). Otherwise torch's threads do it all."""
    import os

    import torch

    if native_models:
        from lsp_server.engine import lean_step
        from lsp_server.kernels import native

        native.set_threads(wanted or 0)
        # torch's one thread leaves the pool's cores alone between the products of a step,
        # so the workers may wait through those gaps awake (dispatch.c, sf_set_spin_us).
        native.set_spin_us(NATIVE_SPIN_US)
        # prompts' products of many rows on the wide path; verifies stay on the exact one
        native.set_wide_rows(lean_step.wide_rows(native.variant()))
        native.set_wide_rows_q4_0(lean_step.WIDE_ROWS_Q4_0)  # the draft's: exact, so verifies may take it
        torch.set_num_threads(1)
        return native.threads()
    torch.set_num_threads(wanted or os.cpu_count() or 1)
    return torch.get_num_threads()


# What "auto" means on a CPU: a model's GGUF file's own blocks on specfill's native kernels
# (kernels/gguf.py) where they are built and a vector variant runs; else the dense weights
# in torch (bf16 where the CPU computes it natively, fp32 otherwise: models.loader), slow
# but correct. The native kernels compute rows independently: speculation is exact. They
# replaced zentorch's W8A8 and torch's int4 kernels, which they beat in the same run
# (docs/benchmarks.md) and which ran on some CPUs only.
NATIVE_QUANT = "gguf"
DENSE_QUANT = "bf16"  # the dense weights at model.dtype (the tag's name is the CUDA default's)


def native_kernels_run() -> bool:
    """The native library is built and a vector variant of it runs here (its scalar variant
    is a reference, ~20x slower: `auto` does not pick it, `gguf` asked for still runs it)."""
    from lsp_server.kernels import native

    return native.available() and native.variant() != "scalar"


def resolve_quant(tag: str, device_type: str, has_gguf: bool) -> str:
    """The weights `tag` means for one model; `has_gguf`: its GGUF file is on disk."""
    if tag != "auto":
        return tag
    if device_type == "cpu" and has_gguf and native_kernels_run():
        return NATIVE_QUANT
    return DENSE_QUANT  # CUDA, or a CPU the native kernels cannot serve


def kernel_lines(quants: dict[str, str]) -> list[str]:
    """Which CPU kernels the models run on here, and why: for the load log and `specfill
    doctor`. `quants`: each role's resolved weights."""
    from lsp_server.kernels import cpu, native

    lines = [f"CPU: {cpu.describe()}"]
    if any(q == NATIVE_QUANT for q in quants.values()):
        lines.append(f"CPU kernels: specfill native {native.variant()} x {native.threads()} threads on the "
                     "GGUF files' own blocks (rows independent)")
    dense = [role for role, q in quants.items() if q == DENSE_QUANT]
    if dense:
        why = native.why_unavailable() if not native.available() else (
            "this CPU runs only their scalar reference (no AVX2)" if native.variant() == "scalar"
            else "no GGUF file, or dense weights asked for")
        lines.append(f"{' and '.join(dense)}: dense torch weights (slow on a CPU); native kernels not used: {why}")
    return lines


def special_token_ids(tokenizer: Any) -> set[int]:
    """Ids of the tokenizer's special added tokens: control tokens, never code."""
    return {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}


def _prepare(model: Any, role: str, quant: str, progress: Callable[[str], None]) -> None:
    """Get one model's layers ready for lean steps: a GGUF draft's finer blocks requantized
    to Q4_0, q/k/v and gate/up fused."""
    if quant == NATIVE_QUANT:
        progress(f"{role}: the GGUF file's blocks, multiplied in place (nothing converted)")
        if role == "draft":
            from lsp_server.kernels.gguf import requantize_to_q4_0

            t = time.perf_counter()
            before, after = requantize_to_q4_0(model)
            if before:
                progress(f"draft: its {before / 1e6:,.0f} MB of Q5_0 / Q8_0 / Q6_K matrices requantized to Q4_0 "
                         f"({after / 1e6:,.0f} MB) in {time.perf_counter() - t:.1f} s: fewer bytes a draft step; "
                         "the output stays the target's")
    ready_for_lean_steps(model, role, progress)


def ready_for_lean_steps(model: Any, role: str, progress: Callable[[str], None]) -> None:
    """Fuse the layers the lean steps call and say whether a verify computes what single
    steps compute."""
    from lsp_server.engine.lean_step import ROWS_INDEPENDENT
    from lsp_server.kernels.fuse import fuse_projections, lean_linears
    from lsp_server.kernels.gguf import GGUFLinear
    from lsp_server.kernels.lm_head import flatten_head_input

    fuse_projections(model)  # q/k/v and gate/up in one call each on lean steps
    flatten_head_input(model)
    layers = lean_linears(model)
    if layers and all(isinstance(layer, GGUFLinear) for _, layer in layers):
        # The native kernels compute every row by the same instructions whatever the row count
        # (tests/kernels): a verify computes what single steps compute.
        setattr(model, ROWS_INDEPENDENT, True)
        progress(f"{role}: {len(layers)} native layers (rows independent: verifies are exact)")


# A short piece of code run through the engine at load: every kernel and shape a completion
# uses (prefill, draft head, verifies) is called once before the first real request.
WARM_UP_CODE = "import os\n\n\ndef read(path):\n    with open(path) as f:\n        return f.read()\n"
# Acceptance of the draft in its most predictable contexts (boilerplate: 0.9-0.97 in
# `specfill bench policy`): the most draft tokens a round takes is the k that pays even there.
CAP_ACCEPTANCE = 0.95
# Target feeds timed at load: 1..COST_ROWS rows, i.e. k up to COST_ROWS - 1.
COST_ROWS = 13


def warm_up(engine: Any, prompt: list[int]) -> None:
    from lsp_server.engine.controller import memory_key
    from lsp_server.engine.types import CompletionRequest, DraftPolicy

    policy = DraftPolicy(context="warm-up", max_new_tokens=8, mode="fixed", k_init=4)
    for _ in engine.generate(CompletionRequest("warm-up", tuple(prompt), policy)):
        pass
    engine.clear_caches()
    with engine.memory.lock:
        engine.memory.by_context.pop(memory_key(policy), None)
        engine.memory.lengths.pop(memory_key(policy), None)


def measure_costs(engine: Any, prompt: list[int]) -> Any:
    from lsp_server.engine.costs import measure

    target = engine.pool.slots[0]
    draft = engine.drafter.pool.slots[0]
    try:
        return measure(target, draft, prompt, COST_ROWS)
    finally:
        engine.clear_caches()


def plausible(costs: Any) -> bool:
    """A draft step measured slower than a target step means another process had the cores:
    the 0.5B draft reads a third of the 1.5B target's weights."""
    return costs.draft < costs.target[0]


# How much cheaper a feed of more rows may time than one of fewer before the table is taken
# for a busy moment's (it does all of the smaller feed's work and more).
ROW_NOISE = 0.1


def rising(costs: Any) -> bool:
    """Whether no target feed timed more than ROW_NOISE below a feed of fewer rows. Why: at
    the load of one `bench speculation` server (forced AVX2, AMD EPYC Zen 4) 1 / 2 / 4 / 5
    rows timed 50 / 79 / 139 / 90 ms against 37 / 45 / 62 / 80 live; a table of that shape
    set the cap on draft tokens at 6 (2 at the load of the run before on the same spots), and
    a row count is priced from the load's timing until the live rounds time it three times:
    its lines drafted 4-8 tokens a round and ran 0.82x as fast as without speculation."""
    t = costs.target
    return all(b >= a * (1 - ROW_NOISE) for a, b in zip(t, t[1:]))


def describe_costs(costs: Any) -> str:
    rows = ", ".join(f"{r}: {t * 1e3:.0f}" for r, t in enumerate(costs.target, 1) if r in (1, 2, 4, 5, 8, 13))
    return (f"target feed ms by rows {{{rows}}}, draft step {costs.draft * 1e3:.1f} ms, "
            f"draft catch-up {costs.draft_prefill * 1e3:.2f} ms a token, "
            f"target prefill {costs.prefill * 1e3:.2f} ms a token")


def resolved_quants(m: Any) -> dict[str, str]:
    """What model.quant / model.draftQuant mean here, decided before loading: a GGUF model
    is built from its file rather than loaded and then converted. Refuses `gguf` where it
    cannot run, with a way out."""
    from lsp_server.kernels import native
    from lsp_server.models.loader import resolve_dtype_device, resolve_source

    _, device = resolve_dtype_device(m.dtype, m.device)
    quants = {}
    for role, spec, tag in (("target", m.target, m.quant), ("draft", m.draft, m.draftQuant)):
        has_gguf = resolve_source(spec, m.cacheDir or None).gguf is not None
        quants[role] = resolve_quant(tag, device.type, has_gguf)
        if quants[role] == NATIVE_QUANT:
            if device.type != "cpu":
                raise ValueError(f"model quantization gguf runs on the CPU only; set model.device to cpu "
                                 f"or the {role}'s quantization to auto")
            if not native.available():
                raise ValueError(f"the native kernels are not available ({native.why_unavailable()}); "
                                 f"set the {role}'s quantization (model.quant / model.draftQuant) to auto")
            if not has_gguf:
                raise ValueError(f"{spec} has no GGUF file for the native kernels; set its quantization to auto")
    return quants


def load_runtime(config: Config, progress: Callable[[str], None]) -> Runtime:
    from lsp_server.engine.speculative import EngineOptions, SpeculativeEngine
    from lsp_server.models.loader import load_pair
    from lsp_server.models.registry import remove_old_quant_caches, resolve_cache_dir

    m = config.model
    quants = resolved_quants(m)
    freed = remove_old_quant_caches(resolve_cache_dir(m.cacheDir or None))
    if freed:
        progress(f"removed the W8A8 / int4 weight caches of an earlier version ({freed / 1e9:.1f} GB): "
                 "nothing reads them now")
    for line in kernel_lines(quants):
        progress(line)
    progress(f"loading {m.target} (target) and {m.draft} (draft)")
    pair = load_pair(m.target, m.draft, dtype=m.dtype, device=m.device, cache_dir=m.cacheDir or None,
                     native=(quants["target"] == NATIVE_QUANT, quants["draft"] == NATIVE_QUANT))
    native_models = all(q == NATIVE_QUANT for q in quants.values())
    if native_models:
        apply_threads(True, m.threads)  # before the warm-up and the timed round costs
    options = EngineOptions()
    for role, model in (("target", pair.target), ("draft", pair.draft)):
        _prepare(model, role, quants[role], progress)
    fim = fim_tokens(pair.special_tokens, m.target)
    # Any special token in the output (a FIM marker, <|fim_pad|>, <|file_sep|>, ...) means
    # the model has left the middle: stop there rather than show it as text.
    stop_ids = set(pair.stop_ids) | {fim.prefix, fim.suffix, fim.middle} | special_token_ids(pair.tokenizer)
    engine = SpeculativeEngine(pair.target, pair.draft, pair.tokenizer, sorted(stop_ids), options)
    engine.token_texts()  # now rather than in the first completion that heals a token
    tokenizer = pair.tokenizer

    def encode(text: str) -> list[int]:
        # Text that merely looks like a special token stays text.
        return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)

    warm_prompt = [fim.prefix, *encode(WARM_UP_CODE), fim.suffix, fim.middle]
    warm_up(engine, warm_prompt)
    if pair.draft is not None and options.lean_steps and pair.device.type == "cpu":
        time_rounds(engine, warm_prompt, options, progress)
    # Native models copied their weight matrices at load (repacked 8 rows by 8, kernels/native
    # Weight), so those pages of the GGUF maps are not read again; what is still read from
    # the maps (embedding rows, a matrix that could not be repacked) faults back in once,
    # from the page cache.
    released = release_weight_pages(m.cacheDir or None)
    if released:
        progress(f"weight file pages handed back after load: {released / 1e9:.2f} GB of maps "
                 "(read again from the file if ever needed)")
    if native_models:
        progress(huge_pages_line())
    lines = pair.info.lines()
    for line in lines:
        progress(line)
    return Runtime(engine, encode, fim, lines, repo_tokens(tokenizer), native=native_models)


def fim_tokens(special: dict[str, int], target: str) -> Any:
    """The model's fill-in-the-middle markers; a model without them is refused by name."""
    from lsp_server.context.prompt import FimTokens

    missing = [t for t in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>") if t not in special]
    if missing:
        raise ValueError(
            f"{target} has no fill-in-the-middle tokens ({', '.join(missing)}); "
            "choose a FIM-trained code model")
    return FimTokens(special["<|fim_prefix|>"], special["<|fim_suffix|>"], special["<|fim_middle|>"])


def time_rounds(engine: Any, prompt: list[int], options: Any, progress: Callable[[str], None]) -> None:
    """The round costs the engine picks k by, timed on `prompt`; and the largest k they say
    pays here (`options.max_k`). Timings a busy moment spoilt are taken again (`plausible`,
    `rising`); spoilt three times, implausible ones are not used."""
    from lsp_server.engine.costs import best_k

    costs = measure_costs(engine, prompt)
    for _ in range(2):  # a busy moment: timed again, twice at most
        if plausible(costs) and rising(costs):
            break
        costs = measure_costs(engine, prompt)
    if plausible(costs):
        engine.costs = costs
        options.max_k = max(1, best_k(costs, CAP_ACCEPTANCE))
        progress(f"measured round costs: {describe_costs(costs)}; "
                 f"drafting at most {options.max_k} tokens a round pays here")
    else:
        progress(f"round costs not measured cleanly (busy CPU? {describe_costs(costs)}); "
                 "the syntax policy's k bounds apply as they are")


def huge_pages_line() -> str:
    """Where the kernels' weight copies live (kernels.huge_pages): said once at load, since
    without transparent huge pages a verify's products ran 4-13 % slower (bench kernels
    --compare-pages, AMD EPYC Zen 4)."""
    from lsp_server.kernels import huge_pages

    if not huge_pages.enabled():
        return "weight copies in 4 KB pages (huge pages off here)"
    held = huge_pages.huge_bytes()
    if held is None:
        return "weight copies asked for huge pages (this system does not report what it gave)"
    hint = "" if held else ": transparent huge pages are off on this system (/sys/kernel/mm/transparent_hugepage)"
    return f"weight copies in huge pages: {held / 1e9:.2f} GB of the process's memory{hint}"


def release_weight_pages(cache_dir: str | None) -> int:
    """Every kernel has run once (warm-up, costs): the GGUF maps' pages of the matrices the
    native kernels copied at load are not read again, so they go back to the system; a page
    ever read again faults back in from the file (kernels.file_pages)."""
    from lsp_server.engine import heap
    from lsp_server.kernels.file_pages import release_cached_pages
    from lsp_server.models.registry import resolve_cache_dir

    heap.trim()  # the load's and the warm-up's scratch too
    return release_cached_pages([resolve_cache_dir(cache_dir)])


def repo_tokens(tokenizer: Any) -> Any:
    """Qwen2.5-Coder's repository-level markers when the tokenizer has them."""
    from lsp_server.context.cross_file import RepoTokens

    added = tokenizer.get_added_vocab()
    if "<|repo_name|>" in added and "<|file_sep|>" in added:
        return RepoTokens(added["<|repo_name|>"], added["<|file_sep|>"])
    return None

