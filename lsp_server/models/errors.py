"""Errors a user can cause or fix; each message says what to do next."""

from __future__ import annotations


class ModelError(Exception):
    """Base for model fetching and loading problems the user can act on."""


class FetchError(ModelError):
    """Getting a model onto disk failed (network, disk space, bad bytes)."""


class ModelNotFoundError(ModelError):
    """A model spec names nothing usable on disk."""


class TokenizerMismatchError(ModelError):
    """Target and draft would decode the same token ids to different text."""
