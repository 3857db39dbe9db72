"""`specfill models fetch|list` and the model lines of `specfill doctor`.

Nothing here imports torch, so `list` and `doctor` answer in well under a second.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsp_server.models.errors import FetchError
from lsp_server.models.fetch import (fetch_default_pair, gguf_is_recorded, hf_has_weights, hf_is_recorded, read_marker,
                                     sha256_file)
from lsp_server.models.loader import cpu_supports_bf16
from lsp_server.models.registry import PAIRS, ModelPaths, ModelSpec, get_model, resolve_cache_dir

FETCH_HINT = "run `specfill models fetch`"


@dataclass(frozen=True)
class FileStatus:
    path: Path
    size: int | None  # bytes on disk; None when missing
    state: str  # verified | recorded | unrecorded | changed | mismatch | missing
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.state in ("verified", "recorded")


@dataclass(frozen=True)
class ModelStatus:
    spec: ModelSpec
    role: str
    gguf: FileStatus
    hf: FileStatus
    weights: bool = False  # hf/ holds the bf16 safetensors (else only config and tokenizer)

    @property
    def ready(self) -> bool:
        """Loadable by name: the converted copy is what `load_model` uses."""
        return self.hf.ok


def _roles() -> dict[str, str]:
    roles: dict[str, str] = {}
    for pair in PAIRS.values():
        roles.setdefault(pair.target, "target")
        roles.setdefault(pair.draft, "draft")
    return roles


def gguf_status(spec: ModelSpec, paths: ModelPaths, marker: dict[str, Any], verify: bool, progress: bool) -> FileStatus:
    path = paths.gguf(spec)
    if not path.is_file():
        return FileStatus(path, None, "missing")
    size = path.stat().st_size
    if verify:
        digest = sha256_file(path, f"verify {path.name}" if progress else None)
        if digest == spec.source.sha256:
            return FileStatus(path, size, "verified")
        return FileStatus(path, size, "mismatch", f"sha256 {digest}, expected {spec.source.sha256}")
    if gguf_is_recorded(spec, paths, marker):
        return FileStatus(path, size, "recorded")
    if size != spec.source.size:
        return FileStatus(path, size, "mismatch", f"{size:,} bytes, expected {spec.source.size:,}")
    return FileStatus(path, size, "unrecorded", "not hashed since it appeared; use --verify")


def hf_status(spec: ModelSpec, paths: ModelPaths, marker: dict[str, Any], verify: bool, progress: bool) -> FileStatus:
    if not (paths.hf / "config.json").is_file():
        return FileStatus(paths.hf, None, "missing")
    size = sum(p.stat().st_size for p in paths.hf.rglob("*") if p.is_file())
    record = marker.get("hf") or {}
    files: dict[str, dict[str, Any]] = record.get("files") or {}
    if not files or record.get("source_sha256") != spec.source.sha256:
        return FileStatus(paths.hf, size, "unrecorded", "no record of a completed conversion")
    if not verify:
        if hf_is_recorded(spec, paths, marker):
            return FileStatus(paths.hf, size, "recorded")
        return FileStatus(paths.hf, size, "changed", "files changed since conversion; use --verify")
    bad = []
    for name, rec in files.items():
        path = paths.hf / name
        if not path.is_file():
            bad.append(f"{name} missing")
        elif sha256_file(path, f"verify {spec.name}/{name}" if progress else None) != rec.get("sha256"):
            bad.append(f"{name} sha256 differs")
    if bad:
        return FileStatus(paths.hf, size, "mismatch", "; ".join(bad))
    return FileStatus(paths.hf, size, "verified")


def model_status(spec: ModelSpec, cache_dir: Path, verify: bool = False, progress: bool = False) -> ModelStatus:
    paths = ModelPaths.of(cache_dir, spec)
    marker = read_marker(paths.marker)
    return ModelStatus(
        spec,
        _roles().get(spec.name, "-"),
        gguf_status(spec, paths, marker, verify, progress),
        hf_status(spec, paths, marker, verify, progress),
        hf_has_weights(spec, paths, marker),
    )


def default_pair_status(cache_dir: Path, verify: bool = False, progress: bool = False) -> list[ModelStatus]:
    names = dict.fromkeys(name for pair in PAIRS.values() for name in (pair.target, pair.draft))
    return [model_status(get_model(name), cache_dir, verify, progress) for name in names]


def _gb(size: int | None) -> str:
    return "-" if size is None else f"{size / 1e9:.2f} GB"


def format_status(status: ModelStatus) -> list[str]:
    lines = [f"{status.spec.name}  ({status.role}) {status.spec.description}"]
    for label, fs in (("hf", status.hf), ("gguf", status.gguf)):
        detail = f"  [{fs.detail}]" if fs.detail else ""
        if label == "hf" and fs.ok and not status.weights:
            detail = "  [config and tokenizer; bf16 weights made on first use]"
        lines.append(f"  {label:<5}{_gb(fs.size):>10}  {fs.state:<10} {fs.path}{detail}")
    return lines


def doctor_report(cache_dir: str | Path | None = None) -> list[str]:
    """One line per fact `specfill doctor` should show about models; cheap (no hashing, no torch)."""
    root = resolve_cache_dir(cache_dir)
    free = shutil.disk_usage(root if root.exists() else Path.home()).free
    lines = [f"model cache: {root} ({free / 1e9:.1f} GB free)"]
    for status in default_pair_status(root):
        if status.ready:
            gguf = f"gguf {_gb(status.gguf.size)}" if status.gguf.size is not None else "gguf not kept"
            bf16 = (f"bf16 weights {_gb(status.hf.size)}" if status.weights
                    else "bf16 weights made on first use by a run that needs them")
            lines.append(f"{status.role} {status.spec.name}: ready ({gguf}, {bf16})")
        elif status.hf.state == "missing":
            lines.append(f"{status.role} {status.spec.name}: not fetched; {FETCH_HINT}")
        else:
            lines.append(f"{status.role} {status.spec.name}: {status.hf.state} ({status.hf.detail}); {FETCH_HINT}")
    bf16 = cpu_supports_bf16()
    # The native kernels take fp32 rows whatever the CPU; this is about dense weights only.
    lines.append(f"CPU native bf16: {'yes (dense models run in bf16)' if bf16 else 'no (dense models run in fp32 on CPU)'}")
    return lines


def add_models_subcommands(subparsers: Any) -> argparse.ArgumentParser:
    """Add `models fetch|list` to a top-level parser's subparsers; sets `func=main_models`."""
    models = subparsers.add_parser("models", help="fetch and inspect the default model pair")
    commands = models.add_subparsers(dest="models_command", metavar="{fetch,list}", required=True)
    # SUPPRESS: a subparser default would overwrite a --cache-dir given to the top-level parser.
    cache_help = "model cache (default: $SPECFILL_CACHE or ~/.cache/specfill)"
    fetch = commands.add_parser("fetch", help="download and verify the default pair (idempotent)")
    fetch.add_argument("--cache-dir", default=argparse.SUPPRESS, help=cache_help)
    fetch.add_argument("--bf16", action="store_true",
                       help="also convert them to bf16 safetensors now (else made on first use by a bf16, "
                            "CUDA run; the native kernels run from the .gguf files)")
    fetch.add_argument("--no-keep-gguf", action="store_true",
                       help="delete the .gguf files after converting them to bf16 (implies --bf16)")
    fetch.add_argument("--quiet", action="store_true", help="no progress bars")
    listing = commands.add_parser("list", help="show what is on disk and whether it verifies")
    listing.add_argument("--cache-dir", default=argparse.SUPPRESS, help=cache_help)
    listing.add_argument("--verify", action="store_true", help="re-hash every file (about 10 s)")
    models.set_defaults(func=main_models)
    return models


def _run_fetch(args: argparse.Namespace, root: Path) -> int:
    try:
        results = fetch_default_pair(root, progress=not args.quiet, keep_gguf=not args.no_keep_gguf,
                                     weights=args.bf16)
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for result in results:
        print(f"{result.name}: {', '.join(result.actions) or 'already in place'} -> {result.hf_dir}")
    return 0


def _run_list(args: argparse.Namespace, root: Path) -> int:
    print(f"cache: {root}")
    statuses = default_pair_status(root, verify=args.verify, progress=args.verify and sys.stderr.isatty())
    for status in statuses:
        print("\n".join(format_status(status)))
    if not all(s.ready for s in statuses):
        print(f"some models are not ready; {FETCH_HINT}")
    failed = [fs for s in statuses for fs in (s.hf, s.gguf) if fs.state == "mismatch"]
    return 1 if failed else 0


def main_models(args: argparse.Namespace) -> int:
    root = resolve_cache_dir(getattr(args, "cache_dir", None))
    if args.models_command == "fetch":
        return _run_fetch(args, root)
    return _run_list(args, root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specfill")
    add_models_subcommands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
