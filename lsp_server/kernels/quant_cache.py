"""Quantized weights cached on disk, so a later start loads them instead of re-quantizing.

Layout, next to the converted model (`SPECFILL_CACHE` overrides `~/.cache/specfill`):

    <root>/<cache_key>/quant/<tag>/weights.safetensors   buffers of the quantized layers only
    <root>/<cache_key>/quant/<tag>/int8.bin              W8A8 layers' int8 weights (w8a8 only)
    <root>/<cache_key>/quant/<tag>/quant.json            mode, group size, torch version, ...

`<tag>` is `int8`, `int4-g32`, `mixed-g32`, `int4-g32-nohead`, ... Only the quantized layers
are stored: embeddings and norms already live in the bf16 model the loader built.

A cache is used only if everything in quant.json matches: the int4 packed layout depends on
the torch version and on the CPU capability (AVX2 and AVX512 pack differently), and the
source fingerprint catches a changed model under the same key. Writes go to a temp
directory renamed into place, so a crash never leaves a half-written cache behind.

W8A8 weights live in `int8.bin`, one after another in module order, each at a 64-byte
aligned offset, and a loaded model reads them through a read-only map of that file rather
than a copy. zentorch keeps its own reordered copy of every weight it has seen, so after
load our copy is never read again: `file_pages.release_cached_pages` hands its pages back
(the file is there if the kernel's cache ever evicts a weight and reads it again). Layers
of one block sit back to back (q, k, v; gate, up), so `fuse` stacks them as one view.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import warnings
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from lsp_server.kernels.quantize import (
    DEFAULT_GROUP_SIZE,
    LayerKind,
    QuantConfig,
    QuantMode,
    empty_quantized_linear,
    linear_names,
    quantize_model,
    quantized_layers,
    set_submodule,
)
from lsp_server.models.registry import MODELS, resolve_cache_dir

log = logging.getLogger(__name__)

CACHE_FORMAT = 3
WEIGHTS_FILE = "weights.safetensors"
INT8_FILE = "int8.bin"
# zentorch's int8 kernel crashed on weights at 8-byte aligned addresses; torch's allocator
# gives 64, and so does this file's layout (the map itself starts on a page).
INT8_ALIGN = 64
META_FILE = "quant.json"
_FINGERPRINT_SAMPLES = 4096


@dataclass(frozen=True)
class QuantMeta:
    format: int
    mode: str
    group_size: int
    include_lm_head: bool
    torch_version: str
    cpu_capability: str
    source_fingerprint: str
    quantized: dict[str, LayerKind]  # layer name -> int8 / int4
    int8_file: dict[str, list[int]] = field(default_factory=dict)  # W8A8 weight -> [offset, rows, cols]


def quant_dir(cache_key: str, config: QuantConfig, root: Path | None = None) -> Path:
    """<root>/<cache_key>/quant/<tag>; root defaults to $SPECFILL_CACHE or ~/.cache/specfill."""
    return resolve_cache_dir(root) / cache_key / "quant" / config.tag


def quant_cache_key(spec: str) -> str:
    """The cache key for a model spec: a registry name as is, a path as local/<name>-<hash>.

    The source fingerprint still guards against a changed model under the same key.
    """
    if spec in MODELS:
        return spec
    path = Path(spec).expanduser().resolve()
    return f"local/{path.stem}-{hashlib.sha256(str(path).encode()).hexdigest()[:10]}"


def source_fingerprint(model: nn.Module, config: QuantConfig) -> str:
    """A cheap hash of the layers to be quantized: names, shapes and a strided sample of values.

    Reading every weight would cost seconds; a few thousand values per layer catch a
    different model under the same cache key.
    """
    digest = hashlib.sha256()
    for name in linear_names(model, config):
        weight = model.get_submodule(name).weight.detach()
        flat = weight.reshape(-1)
        stride = max(1, flat.numel() // _FINGERPRINT_SAMPLES)
        digest.update(f"{name}:{tuple(weight.shape)}:{weight.dtype}".encode())
        digest.update(flat[::stride].to(torch.float32).numpy().tobytes())
    return digest.hexdigest()


def _runtime() -> dict[str, str]:
    return {"torch_version": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def read_meta(directory: Path) -> QuantMeta | None:
    try:
        raw = json.loads((directory / META_FILE).read_text())
        return QuantMeta(**raw)
    except (OSError, ValueError, TypeError):
        return None


def cache_matches(meta: QuantMeta | None, config: QuantConfig, fingerprint: str) -> bool:
    if meta is None:
        return False
    runtime = _runtime()
    return (meta.format == CACHE_FORMAT and meta.mode == config.mode and meta.group_size == config.group_size
            and meta.include_lm_head == config.include_lm_head
            and meta.torch_version == runtime["torch_version"]
            and meta.cpu_capability == runtime["cpu_capability"]
            and meta.source_fingerprint == fingerprint)


def _remove_orphaned_temp_dirs(directory: Path) -> None:
    """Delete temp dirs (`.<tag>.<pid>.tmp`, up to ~1.5 GB each) left by killed processes."""
    for tmp in directory.parent.glob(f".{directory.name}.*.tmp"):
        pid = tmp.name.removeprefix(f".{directory.name}.").removesuffix(".tmp")
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def save_quantized(model: nn.Module, directory: Path, fingerprint: str) -> Path:
    """Write the quantized layers of `model` (after `quantize_model`) to `directory`, atomically."""
    config: QuantConfig = model.quant_config
    layers = quantized_layers(model)
    tensors = {f"{name}.{key}": tensor.contiguous()
               for name in layers for key, tensor in model.get_submodule(name).state_dict().items()}
    int8 = {name: tensors.pop(f"{name}.weight") for name, kind in layers.items() if kind == "w8a8"}
    meta = QuantMeta(format=CACHE_FORMAT, mode=config.mode, group_size=config.group_size,
                     include_lm_head=config.include_lm_head, source_fingerprint=fingerprint,
                     quantized=layers, int8_file=_int8_layout(int8), **_runtime())
    directory.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphaned_temp_dirs(directory)
    tmp = directory.parent / f".{directory.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"mode": config.mode})
        if int8:
            _write_int8(tmp / INT8_FILE, int8, meta.int8_file)
        (tmp / META_FILE).write_text(json.dumps(asdict(meta), indent=1))
        if directory.exists():
            shutil.rmtree(directory)  # stale: other torch, other CPU or other model
        os.replace(tmp, directory)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if read_meta(directory) == meta:  # another process won the race with the same result
            return directory
        raise
    return directory


def _own_memory(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of `tensor` in torch's own (64-byte aligned, anonymous) memory.

    safetensors serves tensors as views into a private memory map of the file, at offsets
    that are only 8-byte aligned. The int8 kernel crashed (SIGSEGV, every run) on such views
    of a cached model here, and ran fine on copies. What stays in weights.safetensors is
    small (scales, biases) or read by torch's own kernels on every step (int4 packs), so
    it is copied; W8A8 weights come from int8.bin instead (`map_int8`).
    """
    return tensor.clone(memory_format=torch.contiguous_format)


def own_remaining_weights(model: nn.Module) -> None:
    """Copy the layers quantization left (embeddings, norms) into torch's own memory.

    The loader reads safetensors through a private, writable memory map, and the file stays
    mapped while any tensor still points into it. Quantizing reads every weight once (the
    fingerprint, the fit), so all their pages become resident and stay counted in the
    process's memory as long as the map lives: the 1.5B target's 3.5 GB of bf16 pages
    stayed after its layers were replaced by int8 ones (RSS 5.05 GB -> 2.61 GB after this
    copy, measured here). A writable map's pages cannot simply be handed back
    (`file_pages` only touches read-only ones), so the copy it is."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.is_floating_point():
                tensor.data = tensor.data.clone()


def _int8_layout(weights: dict[str, torch.Tensor]) -> dict[str, list[int]]:
    """name -> [byte offset, rows, cols] in int8.bin: module order, 64-byte aligned, so the
    projections of one block are adjacent wherever their sizes are whole multiples of 64."""
    layout, offset = {}, 0
    for name, weight in weights.items():
        offset = -(-offset // INT8_ALIGN) * INT8_ALIGN
        layout[name] = [offset, *weight.shape]
        offset += weight.numel()
    return layout


def _write_int8(path: Path, weights: dict[str, torch.Tensor], layout: dict[str, list[int]]) -> None:
    with open(path, "wb") as f:
        for name, weight in weights.items():
            f.seek(layout[name][0])
            f.write(weight.contiguous().numpy().tobytes())


def map_int8(directory: Path, layout: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    """The W8A8 weights of a cache as views of a read-only map of its int8.bin (no copy).

    Read-only, so no page of it can ever differ from the file: handing its pages back to
    the system (`file_pages`) can never lose data, only cost a re-read."""
    if not layout:
        return {}
    with open(directory / INT8_FILE, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        end = max(offset + rows * cols for offset, rows, cols in layout.values())
        if size < end:
            raise ValueError(f"quantized cache {directory}: {INT8_FILE} holds {size} bytes, its index needs {end}")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    with warnings.catch_warnings():  # "non-writable buffer": read-only is the point
        warnings.simplefilter("ignore", UserWarning)
        data = torch.frombuffer(mapped, dtype=torch.int8)
    return {name: data[offset:offset + rows * cols].view(rows, cols) for name, (offset, rows, cols) in layout.items()}


def map_cached_int8(model: nn.Module, directory: Path) -> None:
    """Point the W8A8 layers of a model just quantized and saved at the saved file (the same
    values), so it holds its weights as a model loaded from the cache does."""
    meta = read_meta(directory)
    mapped = map_int8(directory, meta.int8_file if meta else {})
    for name, weight in mapped.items():
        layer = model.get_submodule(name)
        if not torch.equal(layer.weight, weight):
            raise ValueError(f"quantized cache {directory}: {name} reads back different from what was saved")
        layer.weight = weight


def load_quantized(model: nn.Module, directory: Path) -> nn.Module:
    """Replace the Linear layers listed in `directory`'s quant.json with the cached quantized ones.

    Every cached layer is built and checked before the first one is swapped in, so a cache
    that doesn't fit raises ValueError and leaves `model` as it was.
    """
    meta = read_meta(directory)
    if meta is None:
        raise FileNotFoundError(f"no quantized weights in {directory}")
    if meta.format != CACHE_FORMAT:
        raise ValueError(f"quantized cache {directory} has format {meta.format}, this version reads {CACHE_FORMAT}")
    config = QuantConfig(meta.mode, meta.group_size, meta.include_lm_head)  # type: ignore[arg-type]
    tensors = {key: _own_memory(t) for key, t in load_file(str(directory / WEIGHTS_FILE)).items()}
    tensors.update({f"{name}.weight": weight for name, weight in map_int8(directory, meta.int8_file).items()})
    twins: dict[str, nn.Module] = {}
    for name, kind in meta.quantized.items():
        try:
            linear = model.get_submodule(name)
        except AttributeError:
            linear = None
        if type(linear) is not nn.Linear:
            raise ValueError(f"quantized cache {directory} names {name!r}, not a Linear layer of this model")
        twin = empty_quantized_linear(linear, kind, config.group_size)
        own = {key.removeprefix(f"{name}."): t for key, t in tensors.items() if key.startswith(f"{name}.")}
        try:
            twin.load_state_dict(own, strict=True, assign=True)
        except RuntimeError as err:
            raise ValueError(f"quantized cache {directory} does not fit layer {name!r}: {err}") from err
        twins[name] = twin
    model.to(torch.bfloat16).eval()
    for name, twin in twins.items():
        set_submodule(model, name, twin)
    model.quant_config = config
    return model


def apply_quant(model: nn.Module, mode: QuantMode, cache_key: str | None,
                group_size: int = DEFAULT_GROUP_SIZE, include_lm_head: bool = True,
                root: Path | None = None) -> nn.Module:
    """Quantize `model` in place (bf16 model in, quantized model out), through the disk cache.

    With a `cache_key` (the model's name under the cache root) a matching cache is loaded
    in about a second; otherwise the model is quantized and the result saved for next time.
    `cache_key=None` quantizes without touching the disk. A cache that can't be written
    (read-only disk, full disk) is logged and skipped: the model still works.
    """
    config = QuantConfig(mode, group_size, include_lm_head)
    device = next(model.parameters()).device
    if config.mode != "bf16" and device.type != "cpu":
        raise ValueError(f"{config.tag} uses torch's CPU kernels; the model is on {device}: use bf16 there")
    if quantized_layers(model):
        raise ValueError("the model is quantized already; load it again in bf16 to quantize it differently")
    if config.mode == "bf16" or cache_key is None:
        return quantize_model(model, mode, group_size, include_lm_head)
    directory = quant_dir(cache_key, config, root)
    model.to(torch.bfloat16)
    fingerprint = source_fingerprint(model, config)
    if cache_matches(read_meta(directory), config, fingerprint):
        try:
            return load_quantized(model, directory)
        except (OSError, ValueError) as err:
            log.warning("quantized cache %s unusable (%s); quantizing again", directory, err)
    log.info("quantizing %s to %s, once: the result is cached in %s", cache_key, config.tag, directory)
    start = time.perf_counter()
    quantize_model(model, mode, group_size, include_lm_head)
    log.info("quantized %s to %s in %.0f s", cache_key, config.tag, time.perf_counter() - start)
    try:
        save_quantized(model, directory, fingerprint)
    except OSError as err:
        log.warning("could not cache quantized weights in %s: %s", directory, err)
        return model
    map_cached_int8(model, directory)
    return model


def quantize_for(model: nn.Module, tag: str, spec: str,
                 cache_dir: str | os.PathLike[str] | None = None) -> nn.Module:
    """`apply_quant` from a config tag ("bf16", "int4-g32", "mixed", ...) and a model spec
    (registry name or path), with the same cache directory rules as the loader."""
    config = QuantConfig.parse(tag)
    root = Path(cache_dir).expanduser() if cache_dir else None
    return apply_quant(model, config.mode, quant_cache_key(spec), config.group_size, config.include_lm_head, root)
