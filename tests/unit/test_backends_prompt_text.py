"""Remote prompts: specfill's FIM builder rendered as text, FIM tokens written out."""

from __future__ import annotations

from hypothesis import given, strategies as st

from lsp_server.backends.prompt_text import TextCodec
from lsp_server.context.prompt import ContextBudget, build_fim_prompt
from lsp_server.engine.stopping import stop_strings
from lsp_server.engine.types import DraftPolicy, StopRule


@given(st.text(max_size=300))
def test_pieces_join_back_to_the_exact_text(text):
    codec = TextCodec()
    assert codec.render(codec.encode(text)) == text


def test_psm_prompt_renders_with_the_qwen_fim_tokens_as_text():
    codec = TextCodec()
    prompt = build_fim_prompt("def f(x):\n    return ", "\n\nprint(f(1))\n", codec.encode,
                              codec.fim, ContextBudget(256, 64), "psm")
    text = codec.render(prompt.ids) + prompt.heal
    assert text == "<|fim_prefix|>def f(x):\n    return <|fim_suffix|>\n\nprint(f(1))\n<|fim_middle|>"


def test_psm_line_puts_the_cursor_lines_in_the_middle_and_gives_back_the_healed_text():
    codec = TextCodec()
    prefix = "".join(f"x{i} = {i}\n" for i in range(10)) + "total = x1 + "
    prompt = build_fim_prompt(prefix, "\n", codec.encode, codec.fim, ContextBudget(256, 64),
                              "psm-line")
    text = codec.render(prompt.ids) + prompt.heal
    assert text.startswith("<|fim_prefix|>x0 = 0\n")
    head, middle = text.split("<|fim_middle|>")
    assert head.endswith("<|fim_suffix|>\n")
    assert middle == "x8 = 8\nx9 = 9\ntotal = x1 + "  # the grid line (8) to the cursor


def test_the_prefix_budget_keeps_the_nearest_lines():
    codec = TextCodec()
    prefix = "".join(f"value_{i} = compute({i})\n" for i in range(200))
    prompt = build_fim_prompt(prefix, "", codec.encode, codec.fim, ContextBudget(64, 16), "psm")
    text = codec.render(prompt.ids)
    assert "value_199 = compute(199)" in text and "value_0 =" not in text
    assert 48 <= prompt.prefix_tokens <= 64


def test_only_the_line_rule_becomes_a_server_stop_string():
    assert stop_strings(DraftPolicy(stop=StopRule("line"))) == ("\n",)
    assert stop_strings(DraftPolicy(stop=StopRule("block", 4))) == ()
