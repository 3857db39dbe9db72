"""KVSlot.extend's chunks: fixed, or growing from `first` so that an abort loses at most about
half of what the call did (a preempted warm, a superseded prefill)."""

import torch

from lsp_server.engine.cache import KVSlot


class Recording(KVSlot):
    """The slot's extend with feeds that only record their sizes."""

    def __init__(self):  # no model: feed is replaced
        self.ids, self.fed = [], []

    def rewind(self, keep: int) -> None:
        del self.ids[keep:]

    def feed(self, tokens, all_logits=True):
        self.fed.append(len(tokens))
        self.ids.extend(tokens)
        return torch.zeros(len(tokens), 3)


def test_fixed_chunks_without_first():
    slot = Recording()
    assert slot.extend(list(range(600)), chunk=256)[0] == 600
    assert slot.fed == [256, 256, 88]


def test_chunks_grow_from_first_and_never_pass_what_was_fed_before():
    slot = Recording()
    slot.extend(list(range(1000)), chunk=256, first=64)
    assert slot.fed == [64, 64, 128, 256, 256, 232]
    done = 0
    for size in slot.fed:
        assert size <= max(64, done)
        done += size


def test_only_what_the_slot_lacks_is_fed():
    slot = Recording()
    slot.extend(list(range(100)), chunk=256, first=64)
    slot.fed.clear()
    slot.extend(list(range(130)), chunk=256, first=64)
    assert slot.fed == [30]
