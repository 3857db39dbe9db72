"""Load a target and a draft model (registry name, HF directory or .gguf file) for decoding.

The tokenizer check runs before any weights are loaded: speculative decoding hands token ids
from the draft to the target, so every id both can produce must mean the same token to both.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import psutil

from .errors import ModelError, ModelNotFoundError, TokenizerMismatchError
from .fetch import ensure_weights, hf_is_recorded, read_marker
from .registry import MODELS, ModelPaths, get_model, resolve_cache_dir

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

SourceKind = Literal["registry", "directory", "gguf"]

# Tokens the engine relies on for fill-in-the-middle prompts and stopping.
FIM_AND_STOP_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|endoftext|>", "<|im_end|>")

# Files that define a tokenizer; identical files mean an identical token <-> id mapping.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "tokenizer.model",
)  # fmt: skip

_DTYPE_NAMES = {
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp16": "float16", "float16": "float16", "half": "float16",
    "fp32": "float32", "float32": "float32", "float": "float32",
}  # fmt: skip


@dataclass(frozen=True)
class ModelSource:
    spec: str
    kind: SourceKind
    path: Path  # the HF directory, or the .gguf file
    gguf: Path | None = None  # the GGUF file the weights can run from (kernels.gguf), if any

    @property
    def label(self) -> str:
        return self.spec if self.kind == "registry" else str(self.path)


@dataclass(frozen=True)
class ModelInfo:
    source: ModelSource
    parameters: int
    parameter_bytes: int
    vocab_size: int  # rows of the output head; may exceed the tokenizer (padding)
    load_seconds: float


@dataclass
class LoadedModel:
    model: "PreTrainedModel"
    tokenizer: "PreTrainedTokenizerBase"
    info: ModelInfo


@dataclass(frozen=True)
class PairInfo:
    target: ModelInfo
    draft: ModelInfo
    # Resident memory right after loading. Weights are memory-mapped from safetensors, so it
    # grows as pages are first touched; parameter_bytes is the footprint to plan for.
    rss_bytes: int

    def lines(self) -> list[str]:
        out = []
        for role, info in (("target", self.target), ("draft", self.draft)):
            out.append(
                f"{role}: {info.source.label} ({info.source.kind}) {info.parameters / 1e6:,.0f}M params, "
                f"{info.parameter_bytes / 1e9:.2f} GB, vocab {info.vocab_size}, loaded in {info.load_seconds:.1f} s"
            )
        out.append(f"process RSS after reading the files: {self.rss_bytes / 1e9:.2f} GB "
                   "(before quantization and kernel caches; specfill/stats has the live figure)")
        return out


@dataclass
class LoadedPair:
    target: "PreTrainedModel"
    draft: "PreTrainedModel"
    tokenizer: "PreTrainedTokenizerBase"  # the target's; the draft's agrees on every shared id
    dtype: "torch.dtype"
    device: "torch.device"
    info: PairInfo
    special_tokens: dict[str, int] = field(default_factory=dict)  # FIM and stop tokens found

    @property
    def stop_ids(self) -> tuple[int, ...]:
        # FIM output ends with <|endoftext|>; chat output with <|im_end|>: stop on both.
        return tuple(self.special_tokens[t] for t in ("<|endoftext|>", "<|im_end|>") if t in self.special_tokens)


# ---------------------------------------------------------------- dtype and device


def cpu_supports_bf16(cpuinfo: str | None = None) -> bool:
    """True when the CPU has native bf16 matmuls (AVX512-BF16, AMX, or Arm BF16)."""
    from lsp_server.kernels import cpu

    flags = cpu.flags() if cpuinfo is None else cpu.parse_flags(cpuinfo)
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def resolve_dtype_device(
    dtype: "str | torch.dtype" = "auto", device: "str | torch.device" = "auto"
) -> tuple["torch.dtype", "torch.device"]:
    """auto: CUDA in bf16 (fp16 without bf16 support); else CPU in bf16 if native, fp32 otherwise.

    On CPUs without native bf16, bf16 matmuls are emulated and slower than fp32.
    """
    import torch

    if str(device) == "auto":
        resolved_device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            resolved_device = torch.device(device)
        except RuntimeError as exc:
            raise ModelError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N") from exc
        if resolved_device.type == "cuda" and not torch.cuda.is_available():
            raise ModelError(f"device {device!r} was asked for, but torch sees no CUDA device; use --device cpu")
    if isinstance(dtype, torch.dtype):
        return dtype, resolved_device
    if dtype == "auto":
        if resolved_device.type == "cuda":
            auto = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        else:
            auto = torch.bfloat16 if cpu_supports_bf16() else torch.float32
        return auto, resolved_device
    name = _DTYPE_NAMES.get(str(dtype).lower())
    if name is None:
        raise ModelError(f"unknown dtype {dtype!r}: use auto, bf16, fp16 or fp32")
    return getattr(torch, name), resolved_device


# ---------------------------------------------------------------- where a spec points


def resolve_source(spec: str, cache_dir: str | os.PathLike[str] | None = None) -> ModelSource:
    """A registry name, a directory with config.json, or a .gguf file; else a clear error."""
    if spec in MODELS:
        model = get_model(spec)
        root = resolve_cache_dir(cache_dir)
        paths = ModelPaths.of(root, model)
        if not (paths.hf / "config.json").is_file():
            raise ModelNotFoundError(
                f"model {spec!r} is not on disk in {root}; run `specfill models fetch` "
                "(or point --cache-dir / SPECFILL_CACHE at the directory it was fetched into)"
            )
        if not hf_is_recorded(model, paths, read_marker(paths.marker)):
            raise ModelNotFoundError(
                f"the files of {spec!r} in {paths.hf} changed or are incomplete since they were fetched; "
                "run `specfill models fetch` to repair them"
            )
        gguf = paths.gguf(model) if model.gguf_file else None
        return ModelSource(spec, "registry", paths.hf, gguf if gguf is not None and gguf.is_file() else None)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} is a directory but has no config.json: not a model directory")
        return ModelSource(spec, "directory", path)
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(spec, "gguf", path, path)
    known = ", ".join(sorted(MODELS))
    what = "is not a directory or a .gguf file" if path.exists() else "does not exist"
    raise ModelNotFoundError(f"model {spec!r}: not a registered model ({known}), and the path {what}")


# ---------------------------------------------------------------- loading


def _load_error(source: ModelSource, exc: Exception) -> ModelError:
    hint = (
        "run `specfill models list --verify`, then `specfill models fetch` to repair it"
        if source.kind == "registry"
        else "check that it is a complete, readable model"
    )
    return ModelError(f"could not load {source.label} from {source.path}: {exc}; {hint}")


def load_tokenizer(source: ModelSource, trust_remote_code: bool = False) -> "PreTrainedTokenizerBase":
    from transformers import AutoTokenizer

    try:
        if source.kind == "gguf":
            return AutoTokenizer.from_pretrained(str(source.path.parent), gguf_file=source.path.name)
        return AutoTokenizer.from_pretrained(str(source.path), trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as exc:
        raise _load_error(source, exc) from exc


def load_weights(
    source: ModelSource, dtype: "torch.dtype", device: "torch.device", trust_remote_code: bool = False,
    native: bool = False,
) -> tuple["PreTrainedModel", ModelInfo]:
    """The model in `dtype` on `device`; with `native`, straight from its GGUF file's blocks on
    specfill's own kernels (CPU, fp32 activations; kernels.gguf)."""
    from transformers import AutoModelForCausalLM

    start = time.perf_counter()
    try:
        if native:
            from lsp_server.kernels.gguf import load_gguf_model

            if source.gguf is None:
                raise ModelError(f"{source.label} has no GGUF file to run the native kernels on; "
                                 "set model.quant to auto or bf16")
            model = load_gguf_model(source.path if source.kind != "gguf" else None, source.gguf)
        elif source.kind == "gguf":
            # Dequantizes every tensor (~40 s for 1.5B); `specfill models fetch` converts once instead.
            model = AutoModelForCausalLM.from_pretrained(
                str(source.path.parent), gguf_file=source.path.name, dtype=dtype
            )
        else:
            if source.kind == "registry":  # fetched without them: made from its GGUF on first use
                ensure_weights(get_model(source.spec), source.path.parent.parent)  # <cache>/<name>/hf
            # safetensors only: a pickled pytorch_model.bin can run code when loaded
            model = AutoModelForCausalLM.from_pretrained(
                str(source.path), dtype=dtype, trust_remote_code=trust_remote_code,
                use_safetensors=True,
            )
    except Exception as exc:  # safetensors, json and torch each raise their own types
        if isinstance(exc, (MemoryError, KeyboardInterrupt, ModelError)):
            raise
        raise _load_error(source, exc) from exc
    if not native:
        model.to(device)
    model.eval()
    if device.type == "cpu":
        from lsp_server.kernels.attention import use_packed_gqa  # torch: only when loading

        use_packed_gqa(model)  # decode steps and verifies without the CPU's slow GQA paths
    model.requires_grad_(False)  # no autograd bookkeeping even where grad mode is left on
    from lsp_server.kernels.gguf import block_weights  # torch: only when loading

    params = list(model.parameters())
    in_blocks, block_bytes = block_weights(model)  # weights left in GGUF blocks (native)
    info = ModelInfo(
        source=source,
        parameters=sum(p.numel() for p in params) + in_blocks,
        parameter_bytes=sum(p.numel() * p.element_size() for p in params) + block_bytes,
        vocab_size=model.get_output_embeddings().out_features,
        load_seconds=time.perf_counter() - start,
    )
    return model, info


def load_model(
    spec: str,
    dtype: "str | torch.dtype" = "auto",
    device: "str | torch.device" = "auto",
    cache_dir: str | os.PathLike[str] | None = None,
    trust_remote_code: bool = False,
) -> LoadedModel:
    source = resolve_source(spec, cache_dir)
    resolved_dtype, resolved_device = resolve_dtype_device(dtype, device)
    tokenizer = load_tokenizer(source, trust_remote_code)
    model, info = load_weights(source, resolved_dtype, resolved_device, trust_remote_code)
    return LoadedModel(model, tokenizer, info)


# ---------------------------------------------------------------- tokenizer agreement


def tokenizer_differences(
    a: "PreTrainedTokenizerBase", b: "PreTrainedTokenizerBase", special: tuple[str, ...] = FIM_AND_STOP_TOKENS
) -> list[str]:
    """Human-readable differences; empty when every shared id and special token agrees.

    Ids above the smaller tokenizer's range are ignored: models pad their vocab beyond the
    tokenizer, and ids one side cannot produce never travel from draft to target.
    """
    vocab_a, vocab_b = a.get_vocab(), b.get_vocab()
    by_id_a = {i: t for t, i in vocab_a.items()}
    by_id_b = {i: t for t, i in vocab_b.items()}
    shared = min(max(by_id_a, default=-1), max(by_id_b, default=-1)) + 1
    differing = [i for i in range(shared) if by_id_a.get(i) != by_id_b.get(i)]
    out = []
    if differing:
        examples = ", ".join(f"id {i}: {by_id_a.get(i)!r} vs {by_id_b.get(i)!r}" for i in differing[:3])
        out.append(f"{len(differing)} of {shared} shared token ids differ ({examples})")
    names = set(special) | set(getattr(a, "all_special_tokens", ())) | set(getattr(b, "all_special_tokens", ()))
    for token in sorted(names):
        if (token in vocab_a or token in vocab_b) and vocab_a.get(token) != vocab_b.get(token):
            out.append(f"special token {token!r} is id {vocab_a.get(token)} vs {vocab_b.get(token)}")
    return out


def check_tokenizers_agree(
    target: "PreTrainedTokenizerBase", draft: "PreTrainedTokenizerBase", target_name: str, draft_name: str
) -> None:
    differences = tokenizer_differences(target, draft)
    if differences:
        raise TokenizerMismatchError(
            f"target {target_name} and draft {draft_name} do not share a tokenizer: "
            + "; ".join(differences)
            + ". Speculative decoding passes token ids from draft to target, so pick a draft "
            "from the target's model family (same vocabulary)."
        )


def tokenizer_fingerprint(source: ModelSource) -> str | None:
    """sha256 over a directory's tokenizer files; None for a GGUF (its tokenizer is inside)."""
    if source.kind == "gguf":
        return None
    digest = hashlib.sha256()
    present = [name for name in TOKENIZER_FILES if (source.path / name).is_file()]
    for name in present:
        digest.update(name.encode() + b"\0" + hashlib.sha256((source.path / name).read_bytes()).digest())
    return digest.hexdigest() if present else None


def special_token_ids(tokenizer: "PreTrainedTokenizerBase") -> dict[str, int]:
    vocab: dict[str, Any] = tokenizer.get_vocab()
    return {t: vocab[t] for t in FIM_AND_STOP_TOKENS if t in vocab}


def load_pair(
    target_spec: str,
    draft_spec: str,
    dtype: "str | torch.dtype" = "auto",
    device: "str | torch.device" = "auto",
    cache_dir: str | os.PathLike[str] | None = None,
    trust_remote_code: bool = False,
    native: tuple[bool, bool] = (False, False),
) -> LoadedPair:
    """Resolve both, check the tokenizers agree, then load the weights (target first);
    `native`: (target, draft) run from their GGUF files on specfill's kernels."""
    target_source = resolve_source(target_spec, cache_dir)
    draft_source = resolve_source(draft_spec, cache_dir)
    resolved_dtype, resolved_device = resolve_dtype_device(dtype, device)
    tokenizer = load_tokenizer(target_source, trust_remote_code)
    fingerprint = tokenizer_fingerprint(target_source)
    # Byte-identical tokenizer files (the default pair) agree by construction; loading the
    # draft's tokenizer only to compare 150k entries would add ~2 s to every start.
    if fingerprint is None or fingerprint != tokenizer_fingerprint(draft_source):
        draft_tokenizer = load_tokenizer(draft_source, trust_remote_code)
        check_tokenizers_agree(tokenizer, draft_tokenizer, target_source.label, draft_source.label)
        del draft_tokenizer
    target, target_info = load_weights(target_source, resolved_dtype, resolved_device, trust_remote_code, native[0])
    draft, draft_info = load_weights(draft_source, resolved_dtype, resolved_device, trust_remote_code, native[1])
    if native[0]:
        resolved_dtype = next(target.parameters()).dtype  # fp32: the native model's float type
    info = PairInfo(target_info, draft_info, rss_bytes=psutil.Process().memory_info().rss)
    return LoadedPair(target, draft, tokenizer, resolved_dtype, resolved_device, info, special_token_ids(tokenizer))
