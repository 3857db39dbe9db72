from dataclasses import replace

import pytest

from lsp_server.engine.types import DraftPolicy, StopRule
from lsp_server.syntax.policy import POLICY, PolicyOverrides, describe, policy_for
from lsp_server.syntax.types import ContextKind as K
from tests.unit.syntax_cases import classify_marked


def policy_at(language: str, marked: str, overrides: PolicyOverrides | None = None) -> DraftPolicy:
    return policy_for(classify_marked(language, marked), overrides)


@pytest.mark.parametrize(
    ("language", "marked", "kind"),
    [
        ("python", "import os, sy|\n", K.IMPORT),
        ("python", "def foo(a, b|\n", K.SIGNATURE),
        ("python", "@app.rou|\ndef f():\n    pass\n", K.DECORATOR),
        ("python", "def f(a):\n    print(a, |\n", K.CALL_ARGS),
        ("python", "def f(a):\n    # the |\n", K.COMMENT),
        ("python", 'x = "abc|\n', K.STRING),
        ("go", "func f() {\n\tfmt.Println(a, |\n", K.CALL_ARGS),
        ("rust", "#[derive(Debug, Cl|\nstruct A;\n", K.DECORATOR),
    ],
)
def test_single_line_contexts_stop_at_the_end_of_the_line(language: str, marked: str, kind: K) -> None:
    ctx = classify_marked(language, marked)
    assert ctx.kind == kind
    assert policy_for(ctx).stop == StopRule("line")
    assert policy_for(ctx).context == kind.value


def test_empty_line_in_a_function_body_stops_at_the_dedent_of_the_def() -> None:
    policy = policy_at("python", "def f(a):\n    x = a\n    |\n")
    assert policy.stop == StopRule("block", base_indent=0)


def test_empty_line_in_a_method_body_stops_at_the_method_indent() -> None:
    policy = policy_at("python", "class A:\n    def f(self):\n        self.a = 1\n        |\n")
    assert policy.stop == StopRule("block", base_indent=4)


def test_empty_line_in_a_brace_block_stops_at_its_header_indent() -> None:
    policy = policy_at("java", "class A {\n    void f() {\n        int a = 1;\n        |\n    }\n}\n")
    assert policy.stop == StopRule("block", base_indent=4)


def test_new_line_in_a_multi_line_call_stops_at_the_line_of_the_open_paren() -> None:
    policy = policy_at("python", "def f():\n    result = compute(\n        a,\n        |\n")
    assert policy.context == "call_args"
    assert policy.stop == StopRule("block", base_indent=4)


def test_top_level_empty_line_completes_one_top_level_statement() -> None:
    policy = policy_at("python", "import os\n\n|\n")
    assert policy.stop == StopRule("block", base_indent=0)


def test_text_after_the_cursor_limits_any_context_to_the_line() -> None:
    policy = policy_at("python", "def f(a):\n    |return a\n")
    assert policy.context == "simple_body"
    assert policy.stop == StopRule("line")


def test_cursor_after_code_in_a_body_finishes_the_statement() -> None:
    policy = policy_at("python", "def f(a):\n    total = a +|\n")
    assert policy.stop == StopRule("statement")


def test_docstring_opener_line_gets_a_one_line_summary() -> None:
    assert policy_at("python", 'def f(a):\n    """|\n').stop == StopRule("line")


def test_boilerplate_drafts_more_than_complex_bodies() -> None:
    boilerplate = policy_at("python", "class P:\n    def __init__(self, x):\n        self.x = x\n        |\n")
    complex_ = policy_at("python", "def f(g):\n    for r in g:\n        for x in r:\n            |\n")
    assert boilerplate.context == "simple_body" and complex_.context == "complex_body"
    assert boilerplate.k_init > complex_.k_init
    assert boilerplate.k_max > complex_.k_max


def test_prose_falls_back_to_plain_decoding_sooner_than_code() -> None:
    prose = policy_at("python", "def f():\n    # explain |\n")
    code = policy_at("python", "def f(a):\n    x = a\n    |\n")
    assert prose.entropy_high < code.entropy_high
    assert prose.k_init < code.k_init


def test_every_kind_has_a_consistent_row() -> None:
    assert set(POLICY) == set(K)
    for kind, row in POLICY.items():
        assert 1 <= row.k_min <= row.k_init <= row.k_max, kind
        assert 0 < row.entropy_low < row.entropy_high, kind
        assert 0 < row.draft_p_min < 1 and row.max_new_tokens > 0, kind


def test_user_k_max_caps_the_table() -> None:
    ctx = classify_marked("python", "import os, sy|\n")
    policy = policy_for(ctx, PolicyOverrides(k_max=3))
    assert policy.k_max == 3 and policy.k_init == 3 and policy.k_min <= 3


def test_user_k_max_above_the_table_does_not_raise_it() -> None:
    ctx = classify_marked("python", "import os, sy|\n")
    assert policy_for(ctx, PolicyOverrides(k_max=50)).k_max == POLICY[K.IMPORT].k_max


def test_user_k_is_the_initial_k_even_above_the_table_unless_capped() -> None:
    ctx = classify_marked("python", "def f(g):\n    for r in g:\n        for x in r:\n            |\n")
    assert policy_for(ctx, PolicyOverrides(k=8)).k_init == 8
    capped = policy_for(ctx, PolicyOverrides(k=8, k_max=3))
    assert (capped.k_init, capped.k_max) == (3, 3)


def test_fixed_mode_pins_k() -> None:
    ctx = classify_marked("python", "x = [1, 2, |\n")
    policy = policy_for(ctx, PolicyOverrides(mode="fixed", k=5))
    assert policy.mode == "fixed"
    assert policy.k_min == policy.k_init == policy.k_max == 5


def test_off_mode_and_token_budget_pass_through() -> None:
    ctx = classify_marked("python", "x = [1, 2, |\n")
    policy = policy_for(ctx, PolicyOverrides(mode="off", max_new_tokens=7))
    assert policy.mode == "off" and policy.max_new_tokens == 7
    assert policy_for(ctx).mode == "adaptive"


@pytest.mark.parametrize(
    "bad", [dict(mode="turbo"), dict(k=0), dict(k_max=-1), dict(max_new_tokens=0), dict(k=2.5), dict(k=True)]
)
def test_bad_overrides_are_rejected_with_the_field_name(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        PolicyOverrides(**bad)


def test_describe_names_the_kind_node_and_indents() -> None:
    ctx = classify_marked("python", "def f(a):\n    print(a, |\n")
    line = describe(ctx)
    assert line.startswith("call_args python ")
    assert "block=0" in line and "indent=4" in line and "print(a, " in line
    assert describe(replace(ctx, line_prefix="x" * 500)).count("x") <= 45


def test_syntax_modules_do_not_import_torch() -> None:
    from tests.import_walls import heavy_imports

    assert heavy_imports("lsp_server.syntax.context", "lsp_server.syntax.policy", "lsp_server.syntax.indent") == []
