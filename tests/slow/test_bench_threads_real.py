"""`--threads` reaches the kernels that do a benchmark's work, on the real pair.

It once set torch's threads only: on the native kernels torch runs the small ops on one
thread, and the load reset the kernels' pool to every CPU, so `--threads 1` changed nothing."""

from __future__ import annotations

import json

import pytest

from lsp_server.backends.local_runtime import native_kernels_run
from lsp_server.bench import engine_bench, peers
from lsp_server.kernels import native
from tests.bench_args import parse


@pytest.mark.parametrize("module,argv", [
    (engine_bench, ["--modes", "target"]),
    (peers, ["--llama-modes", ""]),  # specfill's side; tests/remote runs llama-server's
])
def test_the_threads_flag_reaches_the_native_pool(real_cache, tmp_path, module, argv):
    if not native_kernels_run():
        pytest.skip("the native kernels do not run here: torch's threads do the work")
    try:
        args = parse(module, [*argv, "--limit", "1", "--max-new-tokens", "4", "--threads", "1",
                              "--out", str(tmp_path)])
        assert module.run(args) == 0
        assert json.loads((tmp_path / "results.json").read_text())["threads"] == 1
        assert native.threads() == 1  # the pool the run's products went through
    finally:
        native.set_threads(0)
