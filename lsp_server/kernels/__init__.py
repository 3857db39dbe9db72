"""How layers run fast on a CPU: the GGUF files as the models (gguf), our native kernels
(native), fused projections, the lm_head fix, packed GQA attention for dense models,
and the pages of weight files handed back once loaded.
Never imports pygls, tree-sitter or HTTP code."""
