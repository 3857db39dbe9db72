import os

import torch

# Tiny test models are dominated by per-op overhead; a second thread only adds
# synchronisation cost (measured here: 3.5 ms vs 69 ms per forward on a busy 2-core box).
# Slow tests with the real models set their own thread count.
if not os.environ.get("SPECFILL_TEST_THREADS"):
    torch.set_num_threads(1)
