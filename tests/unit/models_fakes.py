"""Fake model-part wheels, a fake package registry and a fake converter for the model tests."""

from __future__ import annotations

import base64
import hashlib
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lsp_server.models.registry import ModelSpec, WheelPartsSource


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(
    dest: Path, package: str, version: str, part_number: int, data: bytes, *, record_data: bytes | None = None
) -> Path:
    """A wheel laid out like the published ones: `<pkg>/data/partNN.bin` plus a RECORD."""
    module = package.replace("-", "_")
    wheel = dest / f"{module}-{version}-py3-none-any.whl"
    member = f"{module}/data/part{part_number:02d}.bin"
    dist_info = f"{module}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{module}/__init__.py", "")
        zf.writestr(member, data)
        record = [record_line(member, data if record_data is None else record_data), f"{dist_info}/RECORD,,"]
        zf.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel


def make_spec(name: str, parts: list[bytes], *, pin_parts: bool = False, sha256: str | None = None) -> ModelSpec:
    whole = b"".join(parts)
    source = WheelPartsSource(
        package_prefix=f"fake-{name}-part",
        version="1.0.0",
        parts=len(parts),
        size=len(whole),
        sha256=sha256 or hashlib.sha256(whole).hexdigest(),
        part_sha256=tuple(hashlib.sha256(p).hexdigest() for p in parts) if pin_parts else (),
    )
    return ModelSpec(name=name, description=f"fake {name}", gguf_file=f"{name}.gguf", source=source, parameters=1000)


@dataclass
class FakeRegistry:
    """Serves `name==version` requirements as wheels; `publish` sets what a package holds."""

    packages: dict[str, bytes] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    on_download: Callable[[str], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, spec: ModelSpec, parts: list[bytes]) -> None:
        for index, data in enumerate(parts, start=1):
            self.packages[spec.source.requirement(index)] = data

    def __call__(self, requirement: str, dest: Path) -> Path:
        with self._lock:
            self.calls.append(requirement)
        if self.on_download is not None:
            self.on_download(requirement)
        name, version = requirement.split("==")
        number = int(name.rsplit("part", 1)[1])
        return build_wheel(dest, name, version, number, self.packages[requirement])


@dataclass
class FakeConverter:
    """Writes a config and a 'weights' file derived from the GGUF bytes, like a real conversion."""

    calls: int = 0
    fail_with: BaseException | None = None

    def __call__(self, gguf: Path, out_dir: Path, on_step: Callable[[str], None]) -> None:
        self.calls += 1
        on_step("dequantize")
        (out_dir / "config.json").write_text('{"model_type": "fake"}')
        if self.fail_with is not None:
            raise self.fail_with
        on_step("save weights")
        (out_dir / "model.safetensors").write_bytes(hashlib.sha256(gguf.read_bytes()).digest() * 4)
        on_step("tokenizer")
        (out_dir / "tokenizer.json").write_text("{}")


class FakeDescriber:
    """Writes a config and a tokenizer file, like `fetch.describe_gguf`: no weights."""

    calls: int = 0

    def __call__(self, gguf: Path, out_dir: Path, on_step: Callable[[str], None]) -> None:
        self.calls += 1
        on_step("config")
        (out_dir / "config.json").write_text('{"model_type": "fake"}')
        on_step("tokenizer")
        (out_dir / "tokenizer.json").write_text("{}")
