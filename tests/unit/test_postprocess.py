"""Post-processing rules, one by one, and the streamed-prefix property."""

from __future__ import annotations

from lsp_server.context.postprocess import (balance_brackets, cut_repeated_lines, final_text, is_blank,
                                            mid_line, single_line, stream_text,
                                            strip_trailing_whitespace_lines, trim_suffix_overlap)


def test_a_completion_ending_with_the_next_suffix_line_is_cut_there():
    suffix = "\n    return total\n"
    assert stream_text("total += x\n    return total", suffix) == "total += x"


def test_a_mid_line_cursor_gets_one_line():
    assert mid_line("):\n    pass") and not mid_line("\n    pass") and not mid_line("   \nx")
    assert single_line("a, b\nc = 3") == "a, b"
    assert stream_text("a, b\nc = 3", ")\n") == "a, b"
    assert stream_text("a, b\nc = 3", "\nnext") == "a, b\nc = 3"


def test_repeated_lines_are_cut_at_the_repetition():
    assert cut_repeated_lines("x = 1\nx = 1\nx = 1") == "x = 1"
    assert cut_repeated_lines("a = f()\nb = g()\na = f()\nb = g()\n") == "a = f()\nb = g()"
    assert cut_repeated_lines("    }\n}\n}") == "    }\n}\n}"  # closers repeat in real code
    assert cut_repeated_lines("a = 1\nb = 2") == "a = 1\nb = 2"


def test_brackets_the_completion_opens_are_closed_or_cut():
    assert balance_brackets("foo(a, b", "\n") == "foo(a, b)"
    assert balance_brackets("foo(a, [b", "\n") == "foo(a, [b])"
    assert balance_brackets("foo(a, b", ")\n") == "foo(a, b"  # the suffix closes it
    assert balance_brackets("x = dict(", "\n") == "x = dict("  # arguments follow below
    assert balance_brackets("f(a,", "\n") == "f(a,"
    assert balance_brackets("y = 2\nz = g(1,\n  2", "\n") == "y = 2"  # cut, multi-line
    assert balance_brackets("a)", "\n") == "a)"  # closes the prefix's bracket
    assert balance_brackets("print('(')", "\n") == "print('(')"  # inside a string
    assert balance_brackets("x = 1  # (see", "\n") == "x = 1  # (see"  # inside a comment


def test_streamed_text_only_ever_grows_towards_the_final_text():
    full = "result = compute(a, b)\nresult = compute(a, b)\nreturn result"
    suffix = "\n"
    shown = [stream_text(full[:n], suffix) for n in range(1, len(full) + 1)]
    final = final_text(full, suffix)
    for earlier, later in zip(shown, shown[1:]):
        assert later.startswith(earlier.rstrip()) or earlier.strip() == ""
    assert final == "result = compute(a, b)"


# --- the suffix overlap ----------------------------------------------------------------


def test_repeated_closing_paren_and_line_break_are_cut():
    # prefix "print(len(" ... the model wrote the suffix's ")" again before stopping.
    assert trim_suffix_overlap("items))\n", ")\n") == "items)"


def test_a_closing_paren_the_middle_needs_is_kept():
    assert trim_suffix_overlap("items)", ")\n") == "items)"


def test_long_inline_repetition_is_cut_without_a_line_break():
    completion = "a: int, b: int) -> int"
    assert trim_suffix_overlap(completion, ") -> int:\n    pass\n") == "a: int, b: int"


def test_following_lines_already_present_are_cut():
    completion = "total = sum(values)\n    return total\n\n\ndef main():\n    run()\n"
    suffix = "\n    return total\n\n\ndef main():\n    run()\n"
    assert trim_suffix_overlap(completion, suffix) == "total = sum(values)"


def test_repetition_that_then_drifts_is_still_cut_at_its_first_line():
    completion = "x = load(path)\n    return result\n    # and more"
    suffix = "\n    return result\n\n\ndef other():\n"
    assert trim_suffix_overlap(completion, suffix) == "x = load(path)"


def test_inner_closing_brace_is_not_mistaken_for_the_suffix():
    completion = "    if (x) {\n        y();\n    }\n"
    assert trim_suffix_overlap(completion, "\n}\n") == "    if (x) {\n        y();\n    }"


def test_outer_closing_brace_repeated_at_the_end_is_cut():
    assert trim_suffix_overlap("    x++;\n}", "\n}\nint main() {}\n") == "    x++;"
    assert trim_suffix_overlap("    x++;\n}\n\n", "\n}\nint main() {}\n") == "    x++;"


def test_a_lone_closing_brace_followed_by_other_code_is_kept():
    completion = "    x++;\n}\nint helper() { return 1; }"
    assert trim_suffix_overlap(completion, "\n}\nint main() {}\n") == completion


def test_crlf_suffix_is_matched_against_lf_completion():
    assert trim_suffix_overlap("foo()\n    bar()\n", "\r\n    bar()\r\n") == "foo()"


def test_completion_that_only_repeats_the_suffix_becomes_empty():
    assert trim_suffix_overlap("    pass\n", "    pass\n") == ""


def test_completion_without_overlap_is_unchanged():
    completion = "if x:\n        return 1\n    return 0"
    assert trim_suffix_overlap(completion, "\n\nclass B:\n    pass\n") == completion


def test_is_blank():
    assert is_blank("") and is_blank(" \n\t\r\n") and not is_blank("  x ")


def test_strip_trailing_whitespace_lines_keeps_the_last_lines_own_spaces():
    assert strip_trailing_whitespace_lines("a = 1\n  \n\n") == "a = 1"
    assert strip_trailing_whitespace_lines("x = \r\n\t\r\n") == "x = "
    assert strip_trailing_whitespace_lines("a\n  b") == "a\n  b"
