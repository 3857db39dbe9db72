"""Server configuration: frozen dataclasses with defaults, built from the client's JSON.

`initializationOptions` and `workspace/didChangeConfiguration` carry the same nested
shape (camelCase keys, as editors write settings). A bad value never stops the server:
it is reported and the value in force is kept (the default, at initialize).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Any

from lsp_server.urls import display_url, insecure_remote
from lsp_server.context.prompt import FIM_MODES
from lsp_server.models.registry import DEFAULT_PAIR, get_pair

DEFAULT_TARGET = get_pair(DEFAULT_PAIR).target
DEFAULT_DRAFT = get_pair(DEFAULT_PAIR).draft


@dataclass(frozen=True)
class ModelConfig:
    target: str = DEFAULT_TARGET
    draft: str = DEFAULT_DRAFT
    dtype: str = "auto"  # auto | bf16 | fp16 | fp32
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    threads: int = 0  # torch CPU threads; 0 = torch's default
    # Weights (auto | gguf | bf16). gguf: the GGUF file's own blocks on specfill's native
    # kernels (kernels/gguf.py), CPU only. bf16: the dense weights in torch, at model.dtype.
    # The target's choice changes its outputs (speculation stays lossless against the target
    # as it runs); the draft's only changes how often its guesses are accepted.
    # auto: gguf on a CPU where the native kernels run and the model has a GGUF file, else
    # bf16 (backends/local_runtime.py).
    quant: str = "auto"
    draftQuant: str = "auto"
    cacheDir: str = ""  # "" = $SPECFILL_CACHE or ~/.cache/specfill


@dataclass(frozen=True)
class SpeculationConfig:
    mode: str = "adaptive"  # adaptive | fixed | off
    k: int = 0  # 0 = the syntax policy's k for the cursor's context
    kMax: int = 0  # 0 = the policy's bound
    promptLookup: bool = True


@dataclass(frozen=True)
class ContextWindow:
    prefixTokens: int = 1024
    # The prefix window of a document's first prompt in a region (a file just opened, a
    # jump): later prompts keep its start and grow it up to prefixTokens, so the first
    # suggestion waits for a short prefill and nothing computed for it is thrown away.
    firstPrefixTokens: int = 320
    # ... at most: the first window is what this machine prefills (both models, as timed at
    # load and by later prefills) in firstWindowS seconds, suffix included, so a slower CPU
    # gets a shorter first window rather than a later first suggestion. 0: always
    # firstPrefixTokens. Remote backends pace their own prefill: firstPrefixTokens.
    firstWindowS: float = 3.0
    # Every keystroke re-prefills the whole suffix window (in PSM order it follows the
    # cursor), so a short one keeps warm latency low; the nearest lines matter most.
    suffixTokens: int = 64
    # psm-line: the order Qwen2.5-Coder was trained on (PSM), with the lines since the last
    # 8-line grid line opening the middle, so typing only grows the prompt at its end
    # (`specfill bench lsp`, bf16 target: first token p50 0.90 s -> 0.30 s, same completions). psm: plain
    # PSM, every keystroke re-prefills the suffix window. spm would keep the prompt growing
    # too, but the model answers SPM prompts with an immediate end-of-text.
    fimMode: str = "psm-line"
    # Tokens of other files put in front of the prompt (context.cross_file). Off by default:
    # the package head (outlines of the open files, prefilled before a file is opened) gave
    # +2 points of exact match on 48 held-out spots, short of what would make it a default;
    # the cursor's sources (definitions, similar windows) cost a prefill on every jump.
    extraTokens: int = 0
    extraSources: str = "all"  # all | definitions | similar | package (see README)
    # Also read files that are not open (context.workspace_files): the modules the file
    # imports and its siblings, only inside the workspace folders, links never followed out.
    workspaceFiles: bool = False


@dataclass(frozen=True)
class BackendConfig:
    """Where completions are generated: the local engine, or remote serving engines."""

    kind: str = "local"  # local | openai | llama-server | ollama
    urls: tuple[str, ...] = ()  # one or more base URLs (http(s)://host:port)
    model: str = ""  # the served model's name (openai, ollama)
    apiKeyEnv: str = ""  # name of the environment variable holding the API key
    apiKeyFile: str = ""  # or a file holding it (first line)
    caFile: str = ""  # PEM CA bundle for https URLs (default: the system's trust store)
    timeoutS: float = 30.0  # longest wait for a connection or the next streamed chunk
    fallback: str = "none"  # local: the local engine (loaded at start) serves when all are down
    allowInsecureHttp: bool = False  # plain http to a host other than this machine


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    speculation: SpeculationConfig = field(default_factory=SpeculationConfig)
    contextWindow: ContextWindow = field(default_factory=ContextWindow)
    backend: BackendConfig = field(default_factory=BackendConfig)
    maxNewTokens: int = 0  # 0 = the policy's budget for the context
    temperature: float = 0.0
    topP: float = 1.0
    readyTimeoutS: float = 120.0  # how long an early request waits for the models
    maxDocumentMB: float = 8.0  # larger documents get no completions (and are not kept)
    # Prefill a cursor's prompt in the background (didOpen, `specfill/warm`, after a
    # completion) at the lowest priority, so the first request finds it cached.
    warm: bool = True
    # After a completion is shown, generate the next one for "accepted all of it" (and
    # "accepted its first line") in the background, so an accept is answered at once.
    # Local engine, greedy only; needs `warm`.
    precompute: bool = True
    enabled: bool = True


_CHOICES: dict[str, tuple[str, ...]] = {
    "model.dtype": ("auto", "bf16", "bfloat16", "fp16", "float16", "fp32", "float32"),
    "speculation.mode": ("adaptive", "fixed", "off"),
    "contextWindow.fimMode": FIM_MODES,
    "backend.kind": ("local", "openai", "llama-server", "ollama"),
    "backend.fallback": ("local", "none"),
    "contextWindow.extraSources": ("all", "definitions", "similar", "package"),
}
_RANGES: dict[str, tuple[float, float]] = {
    "model.threads": (0, 256),
    "speculation.k": (0, 32),
    "speculation.kMax": (0, 32),
    "contextWindow.prefixTokens": (16, 32768),
    "contextWindow.firstPrefixTokens": (16, 32768),
    "contextWindow.firstWindowS": (0.0, 600.0),
    "contextWindow.suffixTokens": (0, 32768),
    "contextWindow.extraTokens": (0, 32768),
    "maxNewTokens": (0, 4096),
    "temperature": (0.0, 5.0),
    "topP": (0.01, 1.0),
    "readyTimeoutS": (0.0, 3600.0),
    "maxDocumentMB": (0.001, 1024.0),
    "backend.timeoutS": (0.1, 3600.0),
}


_QUANT_TAGS = ("auto", "gguf", "bf16")
# Tags earlier versions took, for their own message: a settings file may still hold one.
_REMOVED_QUANT = re.compile(r"^(int8|(int4|mixed|w8a8)(-g(32|64|128|256))?)(-nohead)?$")


def _quant_problem(path: str, value: str) -> str | None:
    if value in _QUANT_TAGS:
        return None
    if _REMOVED_QUANT.match(value):
        return (f"{path} {value!r} is no longer offered: specfill's native kernels replaced zentorch's "
                "W8A8 and torch's int4 / int8 weights (faster on every CPU); set it to auto")
    return f"{path} must be auto, gguf or bf16, got {value!r}"


def _urls_problem(urls: tuple) -> str | None:
    for url in urls:
        if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
            return f"backend.urls must be http(s)://host[:port] URLs, got {url!r}"
    return None


def backend_problem(backend: BackendConfig) -> str | None:
    """A remote backend that cannot work as configured, said so the user can fix it."""
    if backend.kind == "local":
        return None
    if not backend.urls:
        return f"backend.kind is {backend.kind!r} but backend.urls is empty"
    for url in backend.urls:
        if insecure_remote(url) and not backend.allowInsecureHttp:
            return (f"{display_url(url)} is plain http to another machine: use https, or set "
                    "backend.allowInsecureHttp to true if the network is trusted")
    if backend.kind == "ollama" and not backend.model:
        return f"backend.model must name the served model for backend.kind {backend.kind!r}"
    return None


def _check(path: str, default: Any, value: Any) -> str | None:
    """None when `value` is acceptable for the field whose default is `default`."""
    kind = type(default)
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        return f"{path} must be a {kind.__name__}, got {value!r}"
    if path in _CHOICES and value not in _CHOICES[path]:
        return f"{path} must be one of {', '.join(_CHOICES[path])}, got {value!r}"
    if path == "model.device" and not (value in ("auto", "cpu") or value.startswith("cuda")):
        return f"model.device must be auto, cpu or cuda[:N], got {value!r}"
    if path in ("model.quant", "model.draftQuant"):
        return _quant_problem(path, value)
    if path == "backend.urls":
        return _urls_problem(value)
    lo, hi = _RANGES.get(path, (None, None))
    if lo is not None and not lo <= value <= hi:
        return f"{path} must be between {lo} and {hi}, got {value!r}"
    return None


def _merge(obj: Any, data: Any, prefix: str, errors: list[str]) -> Any:
    if not isinstance(data, dict):
        errors.append(f"{prefix or 'settings'} must be an object, got {data!r}")
        return obj
    known = {f.name: f for f in fields(obj)}
    changes = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        if key not in known:
            errors.append(f"unknown setting {path!r} ignored")
            continue
        current = getattr(obj, key)
        if isinstance(current, tuple):  # a JSON list (or one string) for a tuple setting
            value = tuple(value) if isinstance(value, list) else (value,) if isinstance(value, str) else value
        if hasattr(current, "__dataclass_fields__"):
            changes[key] = _merge(current, value, path, errors)
            continue
        problem = _check(path, current, value)
        if problem:
            # `obj` is the config in force (the defaults at initialize): keep its value
            errors.append(f"{problem}; keeping {current!r}")
        else:
            changes[key] = float(value) if isinstance(current, float) else value
    return replace(obj, **changes)


def config_from_options(options: Any, base: Config | None = None) -> tuple[Config, list[str]]:
    """Apply the client's settings over `base` (defaults). Returns the config and the
    problems found, each a sentence the user can act on."""
    errors: list[str] = []
    if options is None or options == []:  # Lua's empty table arrives as a JSON array
        return base or Config(), errors
    config = _merge(base or Config(), options, "", errors)
    problem = backend_problem(config.backend)
    if problem:
        errors.append(f"{problem}; remote completions are off until it is fixed")
    return config, errors


def model_identity(config: Config) -> tuple:
    """The settings that need the models reloaded when they change."""
    m = config.model
    return (m.target, m.draft, m.dtype, m.device, m.cacheDir, m.quant, m.draftQuant)


