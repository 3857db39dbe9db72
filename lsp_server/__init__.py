"""specfill: an LSP inline-completion server backed by a speculative decoding engine."""

import os

__version__ = "0.1.0"

# Idle OpenMP threads sleep instead of spinning (unless the user chose otherwise). Two
# OpenMP runtimes share the cores here, torch's own and the system libgomp that zentorch's
# kernels use, and the editor runs beside the server: with spinning threads a pass over the
# target's 56 W8A8 layers of one step took 444 ms on a busy 2-core machine, 57 ms with
# sleeping ones (one-off timing). It must be set before torch loads its runtime, so here.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
