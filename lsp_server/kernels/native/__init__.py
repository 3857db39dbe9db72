"""The native kernel library (specfill_kernels.h) through ctypes: y [M, N] = x [M, K] . W^T
with W in GGUF quantized blocks (Q8_0, Q5_0, Q4_0, Q4_K, Q6_K), rows independent and every
variant bit-identical to the scalar reference.

Built by `pip install -e .` (setup.py) as `_native*.so` beside this file. Importing this
module does not import torch. SPECFILL_KERNEL=scalar|avx2|avx512|neon|auto picks the variant
at start-up; one this CPU cannot run is refused with a warning and the best one is used."""

from __future__ import annotations

import ctypes
import importlib.machinery
import logging
import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

# Mirrors of specfill_kernels.h's enums and struct sf_layer; tests/kernels/test_native_mirrors.py
# checks them against the C side (a probe compiled from the header), field for field.
VARIANTS = ("scalar", "avx2", "avx512", "neon")  # enum sf_variant
TYPES = {2: "Q4_0", 6: "Q5_0", 8: "Q8_0", 12: "Q4_K", 14: "Q6_K"}  # ggml type id -> name
REPACKED = {2: 102, 6: 106, 8: 108, 12: 112, 14: 114}  # ggml type -> its kernel-side form, 8 rows by 8 (SF_*_X8)
_ERRORS = {-1: "unsupported type", -2: "bad shape", -3: "NULL pointer", -4: "out of memory"}
_STOPPED = -5  # SF_ESTOPPED: request_stop() was called during a layer step
_SIMD_FLAG_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "asimd", "neon", "sve", "fphp", "amx")


def _library_path() -> Path | None:
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if (path := here / f"_native{suffix}").exists():
            return path
    return None


class _MatrixC(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("w", ctypes.c_void_p), ("N", ctypes.c_int64)]


class _LayerC(ctypes.Structure):  # struct sf_layer (specfill_kernels.h), field for field
    _fields_ = [("qkv", _MatrixC * 3), ("n_qkv", ctypes.c_int), ("o", _MatrixC), ("gate_up", _MatrixC * 2),
                ("n_gate_up", ctypes.c_int), ("down", _MatrixC),
                *((name, ctypes.c_void_p) for name in ("qkv_bias", "o_bias", "gate_up_bias", "down_bias",
                                                       "attn_norm", "ffn_norm")),
                ("eps", ctypes.c_float),
                *((name, ctypes.c_int64) for name in ("hidden", "heads", "kv_heads", "head_dim", "ffn")),
                ("scale", ctypes.c_float)]


def _load() -> tuple[ctypes.CDLL | None, str]:
    path = _library_path()
    if path is None:
        return None, ("the native kernels are not built (no _native*.so in lsp_server/kernels/native): "
                      "run `make setup` or `pip install -e .` with a C compiler installed")
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        return None, f"the native kernels at {path} do not load: {exc}"
    c_int, c_i64, c_size, vp = ctypes.c_int, ctypes.c_int64, ctypes.c_size_t, ctypes.c_void_p
    signatures = {
        "sf_variant_supported": (c_int, [c_int]), "sf_variant_best": (c_int, []),
        "sf_set_variant": (c_int, [c_int]), "sf_get_variant": (c_int, []),
        "sf_variant_needs": (ctypes.c_char_p, [c_int]), "sf_dot_form": (ctypes.c_char_p, [c_int, c_int]),
        "sf_dot_peak": (ctypes.c_double, [c_int, c_int, c_i64]), "sf_read_bytes": (ctypes.c_uint64, [vp, c_size]),
        "sf_request_stop": (None, []), "sf_clear_stop": (None, []), "sf_listen_for_stop": (None, [c_int]),
        "sf_set_threads": (None, [c_int]), "sf_get_threads": (c_int, []), "sf_set_spin_us": (None, [c_int]),
        "sf_set_wide_rows": (None, [c_i64]), "sf_get_wide_rows": (c_i64, []), "sf_variant_wide": (c_int, [c_int]),
        "sf_set_wide_rows_q4_0": (None, [c_i64]), "sf_get_wide_rows_q4_0": (c_i64, []),
        "sf_type_supported": (c_int, [c_int]), "sf_block_values": (c_i64, [c_int]),
        "sf_row_bytes": (c_size, [c_int, c_i64]), "sf_act_row_bytes": (c_size, [c_int, c_i64]),
        "sf_matmul": (c_int, [c_int, vp, c_i64, c_i64, vp, c_i64, vp]),
        "sf_dequantize_rows": (c_int, [c_int, vp, c_i64, c_i64, vp]),
        "sf_requantize_rows": (c_int, [c_int, vp, c_i64, c_i64, c_int, vp]),
        "sf_repack": (c_int, [c_int, vp, c_i64, c_i64, vp]),
        "sf_quantize_acts": (c_int, [c_int, vp, c_i64, c_i64, vp]),
        "sf_rmsnorm": (c_int, [vp, vp, c_i64, c_i64, ctypes.c_float, vp]),
        "sf_silu_mul": (c_int, [vp, c_i64, c_i64, vp]),
        "sf_attention": (c_int, [vp, c_i64, vp, vp, c_i64, c_i64, c_i64, c_i64, c_i64, vp, vp, vp, vp,
                                 c_i64, c_i64, ctypes.c_float, vp]),
        "sf_layer_step": (c_int, [ctypes.POINTER(_LayerC), vp, c_i64, vp, vp, vp, vp, c_i64, c_i64]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib, ""


_lib, _why = _load()
# what each variant needs, as /proc/cpuinfo names the flags: the list the C side checks
NEEDS = {name: tuple(_lib.sf_variant_needs(i).decode().split()) for i, name in enumerate(VARIANTS)} if _lib else {}


def available() -> bool:
    return _lib is not None


def why_unavailable() -> str:
    """Empty when available(); else what is missing and what to do."""
    return _why


def _need_lib() -> ctypes.CDLL:
    if _lib is None:
        raise RuntimeError(_why)
    return _lib


def cpu_flags() -> list[str]:
    """This CPU's SIMD flags as /proc/cpuinfo lists them (empty where there is none)."""
    from lsp_server.kernels import cpu

    return sorted(f for f in cpu.flags() if f.startswith(_SIMD_FLAG_PREFIXES))


def variants_supported() -> list[str]:
    lib = _need_lib()
    return [name for i, name in enumerate(VARIANTS) if lib.sf_variant_supported(i)]


def set_variant(name: str) -> None:
    """Use variant `name` ("auto": the best this CPU runs); ValueError if the CPU lacks it."""
    lib = _need_lib()
    index = lib.sf_variant_best() if name == "auto" else VARIANTS.index(name) if name in VARIANTS else -1
    if index < 0:
        raise ValueError(f"unknown kernel variant {name!r}: choose one of {', '.join(VARIANTS)} or auto")
    if lib.sf_set_variant(index) != 0:
        have = " ".join(cpu_flags()) or "none listed"
        raise ValueError(
            f"this CPU ({platform.machine()}) cannot run the {name} kernels: they need "
            f"{', '.join(NEEDS[name])}, and its SIMD flags are: {have}. "
            f"Use one of {', '.join(variants_supported())} (or unset SPECFILL_KERNEL).")


def variant() -> str:
    return VARIANTS[_need_lib().sf_get_variant()]


def dot_peak(name: str, seconds: float = 0.2) -> list[tuple[str, float]]:
    """The dot-product unit's own rate for variant `name`, on every thread at once
    (set_threads): (instruction form, GMAC/s = int8 multiply-adds a ns) for each form its
    products use, widest first, the best of three runs of about `seconds`; [] for the
    reference (no such unit) or a variant this CPU lacks."""
    lib = _need_lib()
    index = VARIANTS.index(name)
    rates = []
    for form in (0, 1):
        if (label := lib.sf_dot_form(index, form)) is None:
            continue
        iters = 1 << 16
        while (rate := lib.sf_dot_peak(index, form, iters)) > 0 and iters * 10 * 64 / rate < seconds * 1e9:
            iters *= 4  # ~10 chains of up to 64 multiply-adds a round
        rates.append((label.decode(), max(rate, *(lib.sf_dot_peak(index, form, iters) for _ in range(2)))))
    return rates


def read_bytes(tensors: "list[torch.Tensor]") -> int:
    """Read every byte of the (contiguous) tensors once, split over the threads, as plainly as
    memory can be read: the rate a one-row pass over them can at best stream at. Returns
    the xor of their 8-byte words (so that nothing is skipped)."""
    lib = _need_lib()
    checksum = 0
    for t in tensors:
        checksum ^= lib.sf_read_bytes(t.data_ptr(), t.numel() * t.element_size())
    return checksum


def _whole(value: int, what: str) -> int:
    """value where it is an int >= 0, else ValueError naming `what` it must be."""
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}, not {value!r}")
    return value


def set_threads(n: int) -> None:
    """Threads per call, the caller's included; 0 = the CPUs this process may run on."""
    _need_lib().sf_set_threads(_whole(n, "threads must be an int >= 0 (0 = all CPUs of the affinity mask)"))


def threads() -> int:
    return _need_lib().sf_get_threads()


def set_spin_us(us: int) -> None:
    """How long an idle worker spins for the next call before it sleeps (default 50 us)."""
    _need_lib().sf_set_spin_us(_whole(us, "spin must be an int >= 0 (microseconds)"))


def set_wide_rows(m: int) -> None:
    """Products of at least m rows (0: none) take the wide path (sf_set_wide_rows): for a
    prefill's hundreds of rows; its numbers are not the exact kernels' (the weights rounded
    once more), so m must stay above a verify's rows."""
    _need_lib().sf_set_wide_rows(_whole(m, "wide rows must be an int >= 0 (0 = never)"))


def wide_rows() -> int:
    return _need_lib().sf_get_wide_rows()


def set_wide_rows_q4_0(m: int) -> None:
    """Products of at least m rows (0: none) of a Q4_0 weight take its wide path
    (sf_set_wide_rows_q4_0): the repacked kernels' numbers bit for bit (Q4_0's nibbles are
    not rounded again), so m is a matter of speed only."""
    _need_lib().sf_set_wide_rows_q4_0(_whole(m, "wide rows must be an int >= 0 (0 = never)"))


def wide_rows_q4_0() -> int:
    return _need_lib().sf_get_wide_rows_q4_0()


def has_wide(name: str) -> bool:
    """Whether variant `name` runs here and has the wide path (the others keep the x8 kernels)."""
    return bool(_need_lib().sf_variant_wide(VARIANTS.index(name)))


def row_bytes(type_id: int, K: int) -> int:
    """Bytes of one weight row of K values; ValueError if K is not a multiple of the block."""
    lib = _need_lib()
    _check_type(lib, type_id)
    size = lib.sf_row_bytes(type_id, K)
    if size == 0:
        raise ValueError(f"K = {K} is not a positive multiple of the {TYPES[type_id]} block "
                         f"({lib.sf_block_values(type_id)} values)")
    return size


def _check_type(lib: ctypes.CDLL, type_id: int) -> None:
    if not lib.sf_type_supported(type_id):
        raise ValueError(f"ggml type {type_id} is not supported by the native kernels; "
                         f"supported: {', '.join(f'{t} ({n})' for t, n in sorted(TYPES.items()))}")


def _check_tensor(name: str, t: "torch.Tensor", dtype: "torch.dtype", ndim: int) -> None:
    if t.dtype != dtype or t.dim() != ndim or t.device.type != "cpu" or not t.is_contiguous():
        raise ValueError(f"{name} must be a contiguous {ndim}-D {dtype} CPU tensor, "
                         f"got {t.dtype} {tuple(t.shape)} on {t.device}"
                         f"{'' if t.is_contiguous() else ' (not contiguous)'}")


def _check_weight(type_id: int, weight: "torch.Tensor", K: int) -> int:
    import torch

    _check_tensor("weight", weight, torch.uint8, 2)
    size = row_bytes(type_id, K)
    if weight.shape[1] != size:
        raise ValueError(f"weight rows are {weight.shape[1]} bytes, but {TYPES[type_id]} rows of "
                         f"K = {K} values are {size} bytes")
    return weight.shape[0]


class Stopped(Exception):
    """A layer step stopped part-way because request_stop() was called."""


def listen_for_stops(on: bool) -> None:
    """Whether the layer steps of the calling thread honour request_stop() (off by default:
    a stop is meant for the engine's worker thread, never for another caller)."""
    if _lib is not None:
        _lib.sf_listen_for_stop(int(on))


def request_stop() -> None:
    """Make the layer step now running on a listening thread, and every one after it, stop
    at its next check, between its matrix products or inside one (Layer.step raises
    Stopped), until clear_stop(). Safe from any thread."""
    if _lib is not None:
        _lib.sf_request_stop()


def clear_stop() -> None:
    if _lib is not None:
        _lib.sf_clear_stop()


def _raise_on(rc: int, what: str) -> None:
    if rc == _STOPPED:
        raise Stopped(what)
    if rc != 0:
        raise RuntimeError(f"{what} failed in the native kernels: {_ERRORS.get(rc, rc)}")


def matmul(type_id: int, weight: "torch.Tensor", x: "torch.Tensor",
           out: "torch.Tensor | None" = None) -> "torch.Tensor":
    """x [M, K] fp32 . W^T, W = weight [N, row_bytes] uint8 in GGUF blocks -> [M, N] fp32."""
    import torch

    _check_tensor("x", x, torch.float32, 2)
    M, K = x.shape
    w = Weight(type_id, weight, K)
    if out is None:
        out = torch.empty(M, w.N, dtype=torch.float32)
    else:
        _check_tensor("out", out, torch.float32, 2)
        if tuple(out.shape) != (M, w.N):
            raise ValueError(f"out must be [{M}, {w.N}], got {tuple(out.shape)}")
    return w.matmul(x, out)  # [M, N]


class Weight:
    """A weight checked once, for the many calls of prompts and heads: each `matmul` then
    costs the C call and little else (the checks of `matmul` above cost ~3x the call itself
    on a small layer). A decode step's layers pass its pointer to `Layer` instead.

    Q8_0, Q5_0, Q4_0, Q4_K and Q6_K with N a multiple of 8 are repacked 8 rows by 8 (sf_repack: a
    copy of the same bytes, the same bits out) unless `repack` is False; otherwise `weight`
    itself is used and kept alive."""

    def __init__(self, type_id: int, weight: "torch.Tensor", K: int, repack: bool = True):
        self.N = _check_weight(type_id, weight, K)
        lib = _need_lib()
        if repack and type_id in REPACKED and self.N % 8 == 0:
            from lsp_server.kernels import huge_pages  # the copy every step streams: huge pages

            packed = huge_pages.empty(weight.shape, weight.dtype)
            rc = lib.sf_repack(type_id, weight.data_ptr(), self.N, K, packed.data_ptr())
            if rc < 0:
                _raise_on(rc, "repack")
            type_id, weight = rc, packed
        self._set(type_id, K, weight)

    def _set(self, type_id: int, K: int, weight: "torch.Tensor") -> None:
        self.type_id, self.K, self.weight, self.N = type_id, K, weight, weight.shape[0]
        self._call = _need_lib().sf_matmul
        self._ptr = weight.data_ptr()

    def _view(self, weight: "torch.Tensor") -> "Weight":
        view = Weight.__new__(Weight)
        view._set(self.type_id, self.K, weight)
        return view

    def _whole_groups(self, start: int, stop: int) -> bool:
        """Rows start..stop-1 of a repacked weight are whole 8-row groups, which lie one
        after another: then they are a weight of their own, a view of this one's bytes."""
        return self.type_id not in REPACKED.values() or (start % 8 == 0 and stop % 8 == 0)

    def rows(self, start: int, stop: int) -> "Weight | None":
        """The weight of output rows start..stop-1, sharing this one's bytes; None where a
        repacked weight would have to be cut inside a group of 8 rows."""
        if not 0 <= start < stop <= self.N or not self._whole_groups(start, stop):
            return None
        return self._view(self.weight[start:stop])

    @staticmethod
    def stacked(parts: "list[Weight]") -> "Weight | None":
        """One weight of the parts' rows one after another, in one buffer, and each part
        re-pointed at its rows of it (their own copies are then freed): the same bytes a
        repack of the stacked rows gives, as groups never straddle parts. None where the
        parts' forms or widths differ, or a repacked part is not whole groups."""
        import torch

        first = parts[0]
        if any(p.type_id != first.type_id or p.K != first.K for p in parts):
            return None
        if not all(p._whole_groups(0, p.N) for p in parts):
            return None
        from lsp_server.kernels import huge_pages  # as every weight copy: huge pages

        rows = sum(p.weight.shape[0] for p in parts)
        whole = huge_pages.empty((rows, *first.weight.shape[1:]), first.weight.dtype)
        torch.cat([p.weight for p in parts], out=whole)
        stacked = first._view(whole)
        start = 0
        for p in parts:
            p._set(p.type_id, p.K, stacked.weight[start:start + p.N])
            start += p.N
        return stacked

    def matmul(self, x: "torch.Tensor", out: "torch.Tensor") -> "torch.Tensor":
        """x [M, K] contiguous fp32 -> out [M, N] contiguous fp32 (the caller's shapes)."""
        _raise_on(self._call(self.type_id, self._ptr, self.N, self.K, x.data_ptr(), x.shape[0], out.data_ptr()),
                  "matmul")
        return out


# The float steps of a layer (specfill_kernels.h): called per layer of a decode step, so
# they check only what the C side cannot (dtypes, layouts); it checks the shapes.


def rmsnorm(x: "torch.Tensor", weight: "torch.Tensor", eps: float, out: "torch.Tensor") -> "torch.Tensor":
    """out [M, K] = x / sqrt(mean(x^2) + eps) * weight, x and out contiguous fp32."""
    _raise_on(_need_lib().sf_rmsnorm(x.data_ptr(), weight.data_ptr(), x.shape[0], x.shape[1], eps, out.data_ptr()),
              "rmsnorm")
    return out


def silu_mul(gate_up: "torch.Tensor", out: "torch.Tensor") -> "torch.Tensor":
    """out [M, F] = silu(gate) * up for gate_up [M, 2F] = [gate | up]."""
    _raise_on(_need_lib().sf_silu_mul(gate_up.data_ptr(), gate_up.shape[0], out.shape[1], out.data_ptr()),
              "silu_mul")
    return out


def attention(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", cos: "torch.Tensor", sin: "torch.Tensor",
              keys: "torch.Tensor", values: "torch.Tensor", past: int, scale: float, out: "torch.Tensor") -> "torch.Tensor":
    """One layer's attention for M new positions (specfill_kernels.h, sf_attention).

    q [M, H * D] and k, v [M, KV * D]: fp32 row views (rows may be strided, values not);
    q and k are rotated in place. cos, sin [M, D]; keys, values [KV, capacity, D] of this
    layer, which receive k, v at past..past+M-1. Returns out [M, H * D]."""
    M = q.shape[0]
    KV, cap, D = keys.shape
    if k.stride() != v.stride() or q.stride(1) != 1 or k.stride(1) != 1:
        raise ValueError("attention: q, k, v must be row views of unit stride, k and v alike")
    _raise_on(_need_lib().sf_attention(
        q.data_ptr(), q.stride(0), k.data_ptr(), v.data_ptr(), k.stride(0), M, q.shape[1] // D, KV, D,
        cos.data_ptr(), sin.data_ptr(), keys.data_ptr(), values.data_ptr(), cap, past, scale, out.data_ptr()),
        "attention")
    return out


class Layer:
    """A decoder layer for sf_layer_step, described once: its matrices (Weight, in groups
    q|k|v and gate|up of one to three parts), biases and norm weights (fp32 [N] tensors or
    None), kept alive here while the library holds their addresses."""

    def __init__(self, qkv: "list[Weight]", o: Weight, gate_up: "list[Weight]", down: Weight,
                 biases: "tuple", norms: "tuple", eps: float, heads: int, kv_heads: int, head_dim: int,
                 scale: float):
        import torch

        self._keep = [*qkv, o, *gate_up, down, *biases, *norms]
        hidden, ffn = o.N, down.K
        for name, t, n in (("qkv_bias", biases[0], (heads + 2 * kv_heads) * head_dim), ("o_bias", biases[1], hidden),
                           ("gate_up_bias", biases[2], 2 * ffn), ("down_bias", biases[3], hidden),
                           ("attn_norm", norms[0], hidden), ("ffn_norm", norms[1], hidden)):
            if t is not None:
                _check_tensor(name, t, torch.float32, 1)
                if t.numel() != n:
                    raise ValueError(f"{name} has {t.numel()} values, the layer needs {n}")
        c = _LayerC()
        for i, w in enumerate(qkv):
            c.qkv[i] = _MatrixC(w.type_id, w._ptr, w.N)
        for i, w in enumerate(gate_up):
            c.gate_up[i] = _MatrixC(w.type_id, w._ptr, w.N)
        c.n_qkv, c.n_gate_up = len(qkv), len(gate_up)
        c.o, c.down = _MatrixC(o.type_id, o._ptr, o.N), _MatrixC(down.type_id, down._ptr, down.N)
        c.qkv_bias, c.o_bias, c.gate_up_bias, c.down_bias = (None if b is None else b.data_ptr() for b in biases)
        c.attn_norm, c.ffn_norm = (t.data_ptr() for t in norms)
        c.eps, c.hidden, c.heads, c.kv_heads, c.head_dim, c.ffn, c.scale = (
            eps, hidden, heads, kv_heads, head_dim, ffn, scale)
        self._c = ctypes.byref(c)
        self._struct = c
        self._call = _need_lib().sf_layer_step

    def step(self, x: "torch.Tensor", cos: "torch.Tensor", sin: "torch.Tensor", keys: "torch.Tensor",
             values: "torch.Tensor", layer: int, past: int) -> "torch.Tensor":
        """x [M, hidden] contiguous fp32, updated in place through the layer; keys, values
        [layers, KV, capacity, D] contiguous fp32, written at layer `layer`, positions
        past..past+M-1; cos, sin [M, D] contiguous. Raises Stopped after request_stop() on a
        listening thread: x is then partly updated and the cache written at past.., both to
        be dropped."""
        at = layer * keys.stride(0) * 4
        _raise_on(self._call(self._c, x.data_ptr(), x.shape[0], cos.data_ptr(), sin.data_ptr(),
                             keys.data_ptr() + at, values.data_ptr() + at, keys.shape[2], past), "layer step")
        return x


def dequantize(type_id: int, weight: "torch.Tensor", K: int) -> "torch.Tensor":
    """The reference dequantization of weight [N, row_bytes] -> [N, K] fp32."""
    import torch

    lib = _need_lib()
    N = _check_weight(type_id, weight, K)
    out = torch.empty(N, K, dtype=torch.float32)
    _raise_on(lib.sf_dequantize_rows(type_id, weight.data_ptr(), N, K, out.data_ptr()), "dequantize")
    return out  # [N, K]


def requantize(type_id: int, weight: "torch.Tensor", K: int, to_type: int,
               out: "torch.Tensor | None" = None) -> "torch.Tensor":
    """weight [N, row_bytes] in `type_id` blocks, dequantized and quantized again to `to_type`
    (Q4_0 only) with ggml's reference rounding -> out [N, row_bytes(to_type, K)] uint8."""
    import torch

    lib = _need_lib()
    N = _check_weight(type_id, weight, K)
    if out is None:
        out = torch.empty(N, row_bytes(to_type, K), dtype=torch.uint8)
    else:
        _check_tensor("out", out, torch.uint8, 2)
        if tuple(out.shape) != (N, row_bytes(to_type, K)):
            raise ValueError(f"out must be [{N}, {row_bytes(to_type, K)}], got {tuple(out.shape)}")
    _raise_on(lib.sf_requantize_rows(type_id, weight.data_ptr(), N, K, to_type, out.data_ptr()), "requantize")
    return out


def quantize_activations(type_id: int, x: "torch.Tensor") -> "torch.Tensor":
    """Test hook: the int8 activation blocks matmul makes of x [M, K] -> [M, act_row_bytes] uint8."""
    import torch

    lib = _need_lib()
    _check_tensor("x", x, torch.float32, 2)
    M, K = x.shape
    row_bytes(type_id, K)
    out = torch.empty(M, lib.sf_act_row_bytes(type_id, K), dtype=torch.uint8)
    _raise_on(lib.sf_quantize_acts(type_id, x.data_ptr(), M, K, out.data_ptr()), "quantize")
    return out


def _apply_env_variant() -> None:
    """The C side already took SPECFILL_KERNEL if it could; say so when it could not."""
    wanted = os.environ.get("SPECFILL_KERNEL", "").strip().lower()
    if _lib is None or wanted in ("", "auto"):
        return
    try:
        set_variant(wanted)
    except ValueError as exc:
        log.warning("SPECFILL_KERNEL=%s ignored, using %s: %s", wanted, variant(), exc)


_apply_env_variant()
