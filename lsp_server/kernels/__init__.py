"""How layers run fast on a CPU: weight quantization (int8, int4, W8A8 on zentorch), its disk
cache, oneDNN-packed bf16 layers, fused projections, the lm_head fix, packed GQA attention,
and the pages of weight files handed back once loaded.
Never imports pygls, tree-sitter or HTTP code."""
