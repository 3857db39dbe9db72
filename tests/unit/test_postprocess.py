"""Post-processing rules, one by one, and the streamed-prefix property."""

from __future__ import annotations

from lsp_server.context.postprocess import (balance_brackets, cut_repeated_lines, final_text,
                                            mid_line, single_line, stream_text)


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
