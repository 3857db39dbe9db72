"""The console script: subcommands exist, and the model-free ones run."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from lsp_server.bench import BENCHMARKS
from lsp_server.cli import build_parser


def specfill(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lsp_server", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("command", ["serve", "complete", "models", "doctor", "bench"])
def test_every_subcommand_has_help(command):
    out = specfill(command, "--help")
    assert out.returncode == 0 and "usage:" in out.stdout


def test_serve_accepts_the_stdio_flag_editors_add():
    args = build_parser().parse_args(["serve", "--stdio"])
    assert args.stdio and args.tcp is None


def test_every_benchmark_registers_its_arguments():
    out = specfill("bench", "--help")
    assert out.returncode == 0, out.stderr
    for name in BENCHMARKS:
        assert name in out.stdout


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_module_imports_and_has_help(name, capsys):
    module = importlib.import_module(BENCHMARKS[name][0])
    assert callable(module.add_arguments) and callable(module.run)
    with pytest.raises(SystemExit) as exit_info:  # in-process: a subprocess each costs seconds
        build_parser().parse_args(["bench", name, "--help"])
    assert exit_info.value.code == 0 and f"specfill bench {name}" in capsys.readouterr().out


def test_a_missing_benchmark_module_fails_loudly(monkeypatch):
    monkeypatch.setitem(BENCHMARKS, "gone", ("lsp_server.bench.no_such_module", "removed"))
    with pytest.raises(ModuleNotFoundError):
        build_parser()


def test_doctor_without_decode_lists_versions_and_model_files(tmp_path):
    out = specfill("doctor", "--no-decode", "--cache-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "torch 2.13.0" in out.stdout and "pygls 2.1.1" in out.stdout
    assert "qwen2.5-coder-1.5b" in out.stdout


def test_complete_reports_a_missing_file_clearly(tmp_path):
    out = specfill("complete", str(tmp_path / "nope.py"), "--line", "0", "--col", "0")
    assert out.returncode == 2 and "no such file" in out.stderr


@pytest.mark.parametrize("spec,allow,expected", [
    ("9000", False, ("127.0.0.1", 9000)),
    ("localhost:9000", False, ("localhost", 9000)),
    ("[::1]:9000", False, ("::1", 9000)),
    ("127.0.0.2:80", False, ("127.0.0.2", 80)),
    ("0.0.0.0:9000", True, ("0.0.0.0", 9000)),
])
def test_tcp_binds_loopback_unless_remote_is_allowed(spec, allow, expected):
    from lsp_server.cli import tcp_address

    assert tcp_address(spec, allow) == expected


@pytest.mark.parametrize("spec", ["0.0.0.0:9000", "192.168.1.5:9000", "example.com:9000", "x:0", "x:abc"])
def test_tcp_refuses_other_addresses_without_allow_remote(spec):
    from lsp_server.cli import tcp_address

    with pytest.raises(ValueError):
        tcp_address(spec)


def test_serve_tcp_on_a_public_address_exits_with_a_clear_message():
    result = specfill("serve", "--tcp", "0.0.0.0:0")
    assert result.returncode == 2
    assert "not a loopback address" in result.stderr or "port from 1" in result.stderr
