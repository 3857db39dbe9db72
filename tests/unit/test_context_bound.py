"""bench context-bound's oracle chunks and its summary: pure functions, no model."""

from lsp_server.bench.context_bound import oracle_chunks, summarize
from lsp_server.context.snippets import SourceFile

WORDS = lambda text: len(text.split())  # noqa: E731  a token count that needs no tokenizer


def _file(path: str, blocks: list[str]) -> SourceFile:
    # 60 filler lines between blocks: each block lands in windows of its own
    filler = "".join(f"x{i} = {i}\n" for i in range(60))
    return SourceFile(path, filler.join(blocks))


def test_the_oracle_prefers_the_answers_names_the_file_lacks():
    current = SourceFile("/p/a.py", "def run():\n    return\n")
    helpers = _file("/p/helpers.py", ["def frobnicate_widget(w):\n    pass\n",
                                      "def run_again():\n    pass\n"])
    chunks = oracle_chunks(current, "def run():\n", "run frobnicate_widget(w)", "frobnicate_widget(w)",
                           [helpers], budget_tokens=10_000, count_tokens=WORDS)
    assert chunks and "frobnicate_widget" in chunks[0].text
    assert all(c.path == "/p/helpers.py" for c in chunks)


def test_the_oracle_keeps_its_budget_and_leaves_out_chunks_without_the_answers_names():
    current = SourceFile("/p/a.py", "")
    other = _file("/p/b.py", ["def alpha_name():\n    pass\n", "def beta_name():\n    pass\n"])
    assert oracle_chunks(current, "", "", "gamma_name()", [other], 10_000, WORDS) == []
    cost_of_one = WORDS(oracle_chunks(current, "", "", "alpha_name()", [other], 10_000, WORDS)[0].text) + 8
    assert oracle_chunks(current, "", "", "alpha_name()", [other], cost_of_one - 1, WORDS) == []


def test_the_oracles_chunks_never_overlap_and_come_in_file_order():
    current = SourceFile("/p/a.py", "")
    other = _file("/p/b.py", ["def shared_name():\n    pass\n"] * 3)
    chunks = oracle_chunks(current, "", "", "shared_name()", [other], 100_000, WORDS)
    ends = [(c.start_line, c.start_line + c.text.count("\n")) for c in chunks]
    assert ends == sorted(ends)
    assert all(a_end < b_start for (_, a_end), (b_start, _) in zip(ends, ends[1:]))


def test_summary_counts_points_over_the_file_alone():
    def row(file_exact, oracle_exact):
        cell = lambda exact: {"exact": exact, "similarity": 1.0 if exact else 0.5,  # noqa: E731
                              "chunks": 0, "prompt_tokens": 100}
        return {"file": cell(file_exact), "oracle": {**cell(oracle_exact), "chunks": 2}}

    summary = summarize([row(True, True), row(False, True), row(False, False), row(False, False)],
                        ["file", "oracle"])
    by = summary["by_condition"]
    assert (by["file"]["exact_pct"], by["oracle"]["exact_pct"]) == (25.0, 50.0)
    assert by["oracle"]["points_over_file"] == 25.0 and by["oracle"]["with_chunks"] == 4
