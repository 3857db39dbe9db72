"""The bookkeeping of precomputes: which assumed states a request disproves, and what work
counts as wasted."""

from __future__ import annotations

import asyncio

from lsp_server.completion.precompute import Assumed, Pending, Precomputes, accepts, reachable

BEFORE, AFTER = "x = ", "\nprint(x)\n"


def state(inserted: str) -> Assumed:
    return Assumed("u", BEFORE + inserted + AFTER, 0, len(BEFORE + inserted))


def book_with(*inserted: str) -> tuple[Precomputes, list[int], list[Pending]]:
    """A book with one pending precompute per accepted text, and the wasted tokens it reports."""
    wasted: list[int] = []
    book = Precomputes(on_waste=wasted.append)
    book.pending["u"] = [Pending(state(text), text, BEFORE, AFTER) for text in inserted]
    return book, wasted, book.pending["u"]


def test_accepts_offer_all_and_the_first_line_of_several():
    assert accepts("foo(1)") == ["foo(1)"]
    assert accepts("if a:\n    b") == ["if a:\n    b", "if a:"]
    assert accepts("\n    b") == ["\n    b"]  # an empty first line is nothing to accept


def test_typing_through_keeps_the_state_reachable():
    assert reachable(state("foo(1)"), BEFORE + "fo", AFTER)
    assert not reachable(state("foo(1)"), BEFORE + "fx", AFTER)
    assert not reachable(state("foo(1)"), BEFORE + "foo(1)", AFTER)  # that is the state itself


def test_a_request_elsewhere_misses_and_wastes_the_finished_work():
    book, wasted, (done, running) = book_with("foo(1)", "foo")
    book.finished(done, 7)
    assert book.settle("u", state("bar"), BEFORE + "bar", AFTER) == 2
    assert wasted == [7]
    book.finished(running, 3)  # a preempted one reports after it was discarded
    assert wasted == [7, 3]


def test_a_request_at_the_assumed_state_is_no_miss():
    book, wasted, (hit, other) = book_with("foo(1)", "foo")
    book.finished(hit, 5)
    book.finished(other, 2)
    # "foo" typed: the "foo" precompute is the state itself, "foo(1)" is still reachable.
    assert book.settle("u", state("foo"), BEFORE + "foo", AFTER) == 0
    assert wasted == [] and book.pending["u"] == [hit]


def test_an_edit_cancels_the_running_chain():
    async def main():
        book = Precomputes()
        started = asyncio.Event()

        async def run_one(item):
            started.set()
            await asyncio.sleep(10)

        book.start("u", [Pending(state("a"), "a")], run_one)
        await started.wait()
        task = book.tasks["u"]
        book.cancel("u")
        await asyncio.sleep(0)
        assert task.cancelled() or task.cancelling()
    asyncio.run(main())


def test_typing_through_keeps_the_chain_and_another_edit_drops_it():
    async def main():
        book = Precomputes()
        blocker = asyncio.Event()

        async def run_one(item):
            await blocker.wait()

        item = Pending(state("foo(1)"), "foo(1)", BEFORE, AFTER)
        book.start("u", [item], run_one)
        await asyncio.sleep(0)
        book.edited("u", BEFORE + "fo" + AFTER)  # typed two characters of it
        assert "u" in book.tasks
        book.edited("u", BEFORE + "fx" + AFTER)
        await asyncio.sleep(0)
        assert "u" not in book.tasks
    asyncio.run(main())
