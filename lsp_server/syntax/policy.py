"""SyntaxContext -> DraftPolicy: one plain table, and the user's overrides on top.

Boilerplate (imports, signatures, decorators, literals, repeated members) is predictable:
draft many tokens per round. Complex bodies are not: draft few. Prose (strings, docstrings,
comments) has high entropy: draft little and fall back to plain decoding sooner. Which stop
rule a context gets is a column of the table (`engine.stopping` holds the rules).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from lsp_server.engine.stopping import StopKind, StopRule, rule_for
from lsp_server.engine.types import DraftPolicy
from lsp_server.syntax.types import ContextKind, SyntaxContext

Mode = Literal["adaptive", "fixed", "off"]
MODES: tuple[str, ...] = get_args(Mode)


@dataclass(frozen=True)
class PolicyRow:
    k_init: int  # draft tokens per round to start with
    k_min: int  # the controller's bounds for k
    k_max: int
    max_new_tokens: int  # token budget
    stop_mid_line: StopKind  # stop rule when the cursor follows text on its line
    stop_at_line_start: StopKind  # ... and when it starts a (blank) line
    draft_p_min: float  # end a draft round when the draft's top-1 probability drops below
    entropy_high: float  # target entropy (nats) above which to decode plainly
    entropy_low: float  # ... and below which to speculate again


K = ContextKind
# Tuned with `specfill bench policy` (28 stdlib spots, default pair, 2 threads). Under the
# previous table a fixed k = 8 cut by the draft's confidence beat fixed k = 2, 4, 8 and the
# +2/-1 heuristic in five of seven classes and overall, and plain-decoding fallbacks never
# paid (a draft step costs ~1/7 of a target step here, so even a poor round gains). So rows
# start high, stop on confidence and fall back to plain decoding only on very high entropy:
# 1.83x -> 1.91x over the target alone end to end. In that run imports did better at k = 4
# without a high start (acceptance ~0.6), and docstrings on the prose row (three of four were
# then misread as plain strings and got it): both rows now start at 4.
POLICY: dict[ContextKind, PolicyRow] = {
    #                         k_init k_min k_max tokens mid-line     line start p_min H_high H_low
    K.IMPORT:       PolicyRow(4,     1,    8,    32,    "line",      "line",    0.5,  3.5,   2.0),
    K.SIGNATURE:    PolicyRow(8,     2,    12,   48,    "line",      "block",   0.5,  3.5,   2.0),
    K.DECORATOR:    PolicyRow(8,     2,    12,   32,    "line",      "line",    0.5,  3.5,   2.0),
    K.COLLECTION:   PolicyRow(8,     2,    12,   96,    "line",      "block",   0.5,  3.5,   2.0),
    K.CALL_ARGS:    PolicyRow(6,     1,    10,   48,    "line",      "block",   0.5,  3.0,   1.5),
    K.SIMPLE_BODY:  PolicyRow(8,     2,    12,   128,   "statement", "block",   0.5,  3.5,   2.0),
    K.COMPLEX_BODY: PolicyRow(4,     1,    8,    128,   "statement", "block",   0.6,  3.0,   1.5),
    K.STRING:       PolicyRow(4,     1,    8,    32,    "line",      "line",    0.6,  3.0,   1.5),
    K.DOCSTRING:    PolicyRow(4,     1,    8,    64,    "line",      "block",   0.6,  3.0,   1.5),
    K.COMMENT:      PolicyRow(4,     1,    8,    32,    "line",      "line",    0.6,  3.0,   1.5),
    K.UNKNOWN:      PolicyRow(6,     1,    10,   64,    "statement", "block",   0.5,  3.0,   1.5),
}


@dataclass(frozen=True)
class PolicyOverrides:
    """What the user's configuration may force. None keeps the table's value."""

    mode: Mode | None = None
    k: int | None = None  # initial k (the constant k in "fixed" mode)
    k_max: int | None = None  # caps the table's k_max
    max_new_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for name in ("k", "k_max", "max_new_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def policy_for(ctx: SyntaxContext, overrides: PolicyOverrides | None = None) -> DraftPolicy:
    row = POLICY[ctx.kind]
    user = overrides or PolicyOverrides()
    k_max = row.k_max if user.k_max is None else min(row.k_max, user.k_max)
    if user.k is not None and user.k_max is None:
        k_max = max(k_max, user.k)  # an explicit k is honoured unless the user also capped it
    k_init = min(user.k if user.k is not None else row.k_init, k_max)
    k_min = min(row.k_min, k_init)
    mode = user.mode or "adaptive"
    if mode == "fixed":
        k_min = k_max = k_init
    return DraftPolicy(
        context=ctx.kind.value,
        k_init=k_init,
        k_min=k_min,
        k_max=k_max,
        max_new_tokens=user.max_new_tokens or row.max_new_tokens,
        stop=stop_rule(ctx, row),
        draft_p_min=row.draft_p_min,
        entropy_high=row.entropy_high,
        entropy_low=row.entropy_low,
        mode=mode,
    )


def stop_rule(ctx: SyntaxContext, row: PolicyRow | None = None) -> StopRule:
    """The table's stop rule for this cursor, by whether it starts a line (`engine.stopping`
    turns it into the rule: one line whenever text follows the cursor)."""
    row = row or POLICY[ctx.kind]
    kind = row.stop_at_line_start if ctx.at_line_start else row.stop_mid_line
    return rule_for(ctx.line_suffix, kind, ctx.block_indent)


def describe(ctx: SyntaxContext, with_text: bool = True) -> str:
    """One line for logs: `call_args python node=argument_list indent=4 block=0 ...`.
    `with_text=False` leaves out the cursor line's text (the server's default log)."""
    line = f" prefix={ctx.line_prefix[-40:]!r} suffix={ctx.line_suffix[:20]!r}" if with_text else ""
    return (
        f"{ctx.kind.value} {ctx.language} node={ctx.node_type} indent={ctx.line_indent} "
        f"block={ctx.block_indent} depth={ctx.control_depth} ops={ctx.op_density:g}{line}"
    )
