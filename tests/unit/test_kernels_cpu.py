"""What the CPU is and can run: read from /proc/cpuinfo, never probed by running code that
may lack its instructions (zentorch is not even imported where AVX512-VNNI is missing)."""

from __future__ import annotations

import subprocess
import sys

from lsp_server.kernels import cpu

ZEN3 = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma f16c\n"


def test_flags_and_model_come_from_cpuinfo() -> None:
    assert cpu.parse_flags(ZEN3) >= {"avx2", "fma", "f16c"}
    assert "avx512f" not in cpu.parse_flags(ZEN3)
    assert cpu.parse_flags("Features\t: fp asimd asimddp\n") >= {"asimd", "asimddp"}


def test_describe_names_the_model_and_the_kernel_flags_only(monkeypatch) -> None:
    monkeypatch.setattr(cpu, "_cpuinfo", lambda: ZEN3)
    assert cpu.describe().startswith("AMD EPYC 7B13 (")
    assert "avx2 fma f16c" in cpu.describe() and "sse2" not in cpu.describe()


def test_without_avx512_vnni_zentorch_is_never_imported() -> None:
    script = (
        "import sys\n"
        "from lsp_server.kernels import cpu\n"
        "cpu.flags = lambda: frozenset({'avx2', 'fma'})\n"
        "from lsp_server.kernels import w8a8\n"
        "st = w8a8.status()\n"
        "assert not st.usable and 'AVX512-VNNI' in st.why, st\n"
        "assert 'zentorch' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "libdlp" not in done.stderr
