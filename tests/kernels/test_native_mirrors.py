"""The Python mirrors of specfill_kernels.h in lsp_server/kernels/native/__init__.py (VARIANTS,
TYPES, REPACKED, the error codes, _LayerC / _MatrixC, NEEDS) agree with the C side: a probe
compiled from the header prints the enums' values and the structs' layout, and the header's
own enum members and struct fields are all in the probe, so a new one cannot slip past."""

from __future__ import annotations

import ctypes
import json
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lsp_server.kernels import cpu, native

ROOT = Path(__file__).resolve().parents[2]
NATIVE_DIR = ROOT / "lsp_server" / "kernels" / "native"
HEADER = NATIVE_DIR / "specfill_kernels.h"


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc) on PATH")
    exe = tmp_path_factory.mktemp("mirrors") / "mirror_probe"
    build = subprocess.run([cc, "-Wall", "-I", str(NATIVE_DIR), str(ROOT / "tests" / "kernels" / "mirror_probe.c"),
                            "-o", str(exe)], capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    return json.loads(subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True).stdout)


def header_text() -> str:
    return re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)


def enum_members(name: str) -> set[str]:
    body = re.search(rf"enum {name}\s*{{(.*?)}};", header_text(), flags=re.S).group(1)
    return set(re.findall(r"\b(SF_\w+)\s*=", body))


def struct_fields(name: str) -> list[str]:
    body = re.search(rf"struct {name}\s*{{(.*?)}};", header_text(), flags=re.S).group(1)
    fields = []
    for declaration in filter(str.strip, body.split(";")):
        for declarator in declaration.split(","):
            fields.append(re.findall(r"(\w+)\s*(?:\[\w*\])?\s*$", declarator.strip())[0])
    return fields


def test_the_probe_covers_every_enum_member_and_struct_field_of_the_header(probe):
    assert enum_members("sf_type") == set(probe["types"])
    assert enum_members("sf_variant") == set(probe["variants"])
    assert enum_members("sf_error") == set(probe["errors"])
    assert struct_fields("sf_layer") == list(probe["sf_layer"]["fields"])
    assert struct_fields("sf_matrix") == list(probe["sf_matrix"]["fields"])


def test_types_and_their_repacked_forms_match_enum_sf_type(probe):
    plain = {name[3:]: value for name, value in probe["types"].items() if not name.endswith("_X8")}
    assert native.TYPES == {value: name for name, value in plain.items()}
    assert native.REPACKED == {value: probe["types"][f"SF_{name}_X8"] for name, value in plain.items()}


def test_variants_and_error_codes_match_their_enums(probe):
    variants = {name[3:].lower(): v for name, v in probe["variants"].items() if name != "SF_NVARIANTS"}
    assert native.VARIANTS == tuple(sorted(variants, key=variants.get))
    assert len(native.VARIANTS) == probe["variants"]["SF_NVARIANTS"]
    errors = {v for name, v in probe["errors"].items() if name not in ("SF_OK", "SF_ESTOPPED")}
    assert set(native._ERRORS) == errors
    assert native._STOPPED == probe["errors"]["SF_ESTOPPED"]


@pytest.mark.parametrize("struct, mirror", [("sf_layer", native._LayerC), ("sf_matrix", native._MatrixC)])
def test_the_ctypes_structs_lay_out_as_the_c_structs(probe, struct, mirror):
    c_side = probe[struct]
    assert [name for name, _ in mirror._fields_] == list(c_side["fields"])
    for name, _ in mirror._fields_:
        field = getattr(mirror, name)
        assert [field.offset, field.size] == c_side["fields"][name], name
    assert ctypes.sizeof(mirror) == c_side["size"]


@pytest.mark.skipif(not native.available(), reason=native.why_unavailable())
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 variants")
def test_needs_name_the_flags_the_c_side_checks_on_this_cpu():
    """NEEDS comes from the library (sf_variant_needs); on this CPU, a variant runs exactly
    where /proc/cpuinfo lists every flag it names."""
    flags = set(cpu.flags())
    assert native.NEEDS["scalar"] == () and "avx512_vnni" in native.NEEDS["avx512"]
    for i, name in enumerate(native.VARIANTS[:3]):
        assert bool(native._lib.sf_variant_supported(i)) == all(f in flags for f in native.NEEDS[name]), name
