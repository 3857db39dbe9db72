"""Type-through on a remote stream: the text-level form.

The local engine types through token-exactly, from its lineages (engine/lineage.py). A
server's tokens are not seen here, so for the remote backends it is text: a document that
is the one a greedy generation was asked at, plus a start of what that generation streamed
typed at its cursor, with the cursor after it, gets the rest of that stream as its answer,
and the server is not asked again. That is what a greedy server would stream for the new
prompt where its tokenizer splits the typed text as it generated it. The completion service
applies it (completion/streams.py) to a running stream, and to the last stream per document
that ended by itself, where a fresh greedy request ends too.
"""

from __future__ import annotations

ENDED_KEPT = 16  # documents whose last ended remote generation is kept for type-through
ENDS_BY_ITSELF = ("eos", "stop-rule")  # not cut at a budget, which says nothing of what follows


def typed_through(asked: str, offset: int, streamed: str, now: str, cursor: int) -> str:
    """The text typed at `offset` of the document `asked` that makes `now`, where it is a
    start of `streamed` and `cursor` (an offset in `now`) follows it; "" where it is not."""
    typed = now[offset:offset + len(now) - len(asked)]
    if not typed or not streamed.startswith(typed) or now != asked[:offset] + typed + asked[offset:] \
            or cursor != offset + len(typed):
        return ""
    return typed
