"""The compile probe's eager modes on a tiny model: a StaticCache step written in place must
pick the same tokens as the engine's DynamicCache step (compiled modes are too slow to
build in unit tests; the probe itself reports their agreement)."""

import torch

from lsp_server.bench.compile_step import STEPS, measure
from tests.tiny_models import tiny_model


def test_static_cache_steps_match_dynamic_cache_steps():
    model = tiny_model(seed=3, dtype=torch.float32)
    with torch.inference_mode():
        reference = measure(model, "eager-dynamic", 256, None)
        static = measure(model, "eager-static", 256, reference["tokens"])
    assert len(reference["tokens"]) == STEPS + 1
    assert static["top1_same_as_eager"] == 1.0
    assert static["step_ms"] > 0 and static["first_call_s"] >= 0
