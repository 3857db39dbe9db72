"""Keep the lm_head's input two-dimensional.

Under `torch.inference_mode()` on CPU (torch 2.13), `nn.Linear` given a 3-D slice such as
transformers' `hidden_states[:, -1:, :]` (what `logits_to_keep=1` asks for after a prefill)
takes a batched-matmul path that copies the whole transposed weight first: 1.3 s for the
1.5B target's 151,936 x 1,536 head instead of 28 ms, more than half of a 113-token prefill
(measured: prefill 2.1 s -> 0.89 s with this fix). The same input as [T, K] takes the fast
path, so the hooks flatten it and restore the leading dimensions on the way out.
"""

from __future__ import annotations

from torch import nn

_MARK = "_specfill_flat_input"


def _flatten(module: nn.Module, args: tuple):
    x = args[0]
    setattr(module, _MARK, x.shape[:-1])
    return (x.reshape(-1, x.shape[-1]), *args[1:])


def _restore(module: nn.Module, _args: tuple, out):
    return out.reshape(*getattr(module, _MARK), out.shape[-1])


def flatten_head_input(model: nn.Module) -> bool:
    """Hook the model's output projection (idempotent); False when it has none."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        return False
    if not hasattr(head, _MARK):
        setattr(head, _MARK, None)
        head.register_forward_pre_hook(_flatten)
        head.register_forward_hook(_restore)
    return True


def head_pieces(head: nn.Module, piece_bytes: int) -> list[tuple[int, nn.Module]] | None:
    """The output layer cut into row ranges of about `piece_bytes` of weights each, as
    (first row, layer) views of its blocks; None where it is not a GGUF layer without a bias,
    or fits in one piece.

    Why: the 1.5B target's head (151,936 rows, Q6_K, 191 MB) costs as much as ~6 of its
    decoder layers, and a forward checks for aborts only between calls. Computed a piece at a
    time with a check before each, a real request that preempts background work waits for at
    most one piece instead of the whole head. Each output is one row's dot product whatever
    the cut, so the logits are the same bit for bit."""
    from .gguf import GGUFLinear

    if not isinstance(head, GGUFLinear) or head.bias is not None or piece_bytes <= 0:
        return None
    cached = getattr(head, "_specfill_pieces", None)
    if cached is not None and cached[0] == piece_bytes:
        return cached[1]
    rows = head.out_features
    count = -(-head.blocks.numel() // piece_bytes)
    per_piece = -(-rows // count)
    step = -(-per_piece // 8) * 8  # whole groups of 8 rows: views of the repacked copy too
    pieces = None if count <= 1 else [(s, head.rows(s, min(rows, s + step))) for s in range(0, rows, step)]
    head._specfill_pieces = (piece_bytes, pieces)
    return pieces
