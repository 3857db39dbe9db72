"""What the CPU is and can run: read from /proc/cpuinfo, never probed by running code that
may lack its instructions."""

from __future__ import annotations

from lsp_server.kernels import cpu

ZEN3 = ("processor\t: 0\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC 7B13\n"
        "flags\t\t: fpu sse2 avx avx2 fma f16c\n")


def test_flags_and_model_come_from_cpuinfo() -> None:
    assert cpu.parse_flags(ZEN3) >= {"avx2", "fma", "f16c"}
    assert "avx512f" not in cpu.parse_flags(ZEN3)
    assert cpu.parse_flags("Features\t: fp asimd asimddp\n") >= {"asimd", "asimddp"}


def test_describe_names_the_model_and_the_kernel_flags_only(monkeypatch) -> None:
    monkeypatch.setattr(cpu, "_cpuinfo", lambda: ZEN3)
    assert cpu.describe().startswith("AMD EPYC 7B13, family 25 model 1 (")
    assert "avx2 fma f16c" in cpu.describe() and "sse2" not in cpu.describe()
    monkeypatch.setattr(cpu, "_cpuinfo", lambda: "Features\t: fp asimd\n")  # ARM: no family
    assert ", family" not in cpu.describe()
