"""specfill: an LSP inline-completion server backed by a speculative decoding engine."""

import os

__version__ = "0.1.0"

# Idle OpenMP threads spin only briefly before they sleep (unless the user chose a policy).
# torch's runtime and the system libgomp behind zentorch's kernels share the cores, and the
# editor runs beside the server. One-off timings here, a pass over 56 of the target's W8A8
# layers at one row: quiet machine 27 ms spinning / 32 ms sleeping at once; with two busy
# processes beside it 96 ms with libgomp's default spin, 61 ms with GOMP_SPINCOUNT=20000,
# 37 ms sleeping at once. The real target step, quiet: 71 ms default, 73 ms at 20,000, 90
# ms sleeping. 20,000 keeps the quiet speed and most of the busy one. Read when torch
# loads its runtime, so it is set here, before anything imports torch.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "20000")
