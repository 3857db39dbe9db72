"""Greedy and sampled token choice, and the verification rules of speculative decoding.

Notation follows Leviathan et al. / Chen et al.: the target gives p, the drafter gave q,
draft token x is accepted with probability min(1, p(x) / q(x)); on rejection the next
token is drawn from norm(max(0, p - q)). A deterministic drafter (prompt lookup, or greedy
draft at temperature 0) has q = one-hot(x). Greedy verification is the T -> 0 limit:
accept while x == argmax p.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def warp(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
    """Logits [..., V] -> probabilities after temperature and top-p (nucleus) filtering."""
    probs = torch.softmax(logits.float() / s.temperature, dim=-1)  # [..., V]
    if s.top_p >= 1.0:
        return probs
    sorted_p, order = probs.sort(dim=-1, descending=True)
    # Keep the smallest prefix whose mass reaches top_p (the first token is always kept).
    drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= s.top_p
    sorted_p = sorted_p.masked_fill(drop_sorted, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return kept / kept.sum(-1, keepdim=True)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats of softmax(logits) [..., V] -> [...]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def pick(logits: torch.Tensor, s: Sampling, gen: torch.Generator | None) -> int:
    """One token from next-token logits [V]."""
    if s.greedy:
        return int(logits.argmax())
    return int(torch.multinomial(warp(logits, s), 1, generator=gen))


def verify_greedy(draft: list[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """target_logits [k+1, V] scored after each draft prefix -> (accepted count, next token)."""
    best = target_logits.argmax(-1).tolist()  # [k+1]
    n = 0
    while n < len(draft) and draft[n] == best[n]:
        n += 1
    return n, best[n]


def verify_sampled(
    draft: list[int], q: torch.Tensor | None, target_logits: torch.Tensor,
    s: Sampling, gen: torch.Generator | None,
) -> tuple[int, int]:
    """Rejection sampling. q [k, V] are the drafter's probabilities (None: one-hot proposals).

    Returns (accepted count, next token); the output follows the target's warped p exactly.
    """
    p = warp(target_logits, s)  # [k+1, V]
    for i, x in enumerate(draft):
        q_x = float(q[i, x]) if q is not None else 1.0
        p_x = float(p[i, x])
        u = float(torch.rand((), generator=gen))
        if u < min(1.0, p_x / q_x):
            continue
        residual = p[i] - (q[i] if q is not None else _one_hot(x, p.shape[-1], p))
        residual = residual.clamp(min=0.0)
        total = float(residual.sum())
        if total <= 0.0:  # p == q exactly: any draw from p is right
            residual, total = p[i], 1.0
        return i, int(torch.multinomial(residual / total, 1, generator=gen))
    return len(draft), int(torch.multinomial(p[len(draft)], 1, generator=gen))


def _one_hot(x: int, size: int, like: torch.Tensor) -> torch.Tensor:
    v = torch.zeros(size, dtype=like.dtype, device=like.device)
    v[x] = 1.0
    return v
