"""How layers run fast on a CPU: weight quantization (int8, int4, W8A8 on zentorch), its disk
cache, oneDNN-packed bf16 layers, fused projections, the lm_head fix and packed GQA attention.
Never imports pygls, tree-sitter or HTTP code."""
