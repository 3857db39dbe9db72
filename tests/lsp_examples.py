"""Params for any LSP method, generated from lsprotocol's types, and mutations of them.

`example_params(method)` fills the required fields of the method's params type with the
simplest valid values (and every optional field too when `full=True`); `mutations(value)`
yields (path, mutated) pairs: each leaf or object replaced by a wrong type, a negative or
huge number, null, a lone surrogate, or removed. A hostile client in a few lines."""

from __future__ import annotations

import collections.abc
import enum
import json
import typing
from typing import Any, Iterator

import attrs
from lsprotocol import types as lsp
from lsprotocol.converters import get_converter

_converter = get_converter()
URI = "file:///tmp/specfill-fuzz.py"


def _example(tp: Any, depth: int = 0) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is type(None):
        return None
    if origin is typing.Union:
        choices = [a for a in args if a is not type(None)]
        return _example(choices[0], depth)
    if origin is typing.Literal:
        return args[0]
    if origin in (list, tuple, collections.abc.Sequence) or tp is list:
        return [_example(args[0], depth + 1)] if args and depth < 6 else []
    if origin is dict or tp is dict:
        return {}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return next(iter(tp))
    if tp is bool:
        return False
    if tp is int:
        return 0
    if tp is float:
        return 0.0
    if tp is str:
        return URI
    if attrs.has(tp):
        hints = typing.get_type_hints(tp)
        values = {}
        for field in attrs.fields(tp):
            if field.default is attrs.NOTHING:
                values[field.name] = _example(hints[field.name], depth + 1)
        return tp(**values)
    return {}  # LSPAny, object


def example_params(method: str) -> Any:
    """JSON params for `method`, valid by lsprotocol's own types (None when it takes none)."""
    message_type = lsp.METHOD_TO_TYPES[method][0]
    params_type = typing.get_type_hints(message_type)["params"]
    raw = _converter.unstructure(_example(params_type), params_type)
    return json.loads(json.dumps(raw, default=lambda e: e.value))  # enums inside unions


WRONG_VALUES: tuple[Any, ...] = (-1, -5, "here", None, {}, [], 2**53, 1.5, "\ud800", True)


def mutations(value: Any, path: str = "params") -> Iterator[tuple[str, Any]]:
    """(path, whole mutated value) for every single-point mutation of `value`."""
    for wrong in WRONG_VALUES:
        if wrong != value or type(wrong) is not type(value):
            yield path, wrong
    if isinstance(value, dict):
        for key, inner in value.items():
            yield f"{path}.{key} removed", {k: v for k, v in value.items() if k != key}
            for sub_path, mutated in mutations(inner, f"{path}.{key}"):
                yield sub_path, {**value, key: mutated}
    elif isinstance(value, list) and value:
        for sub_path, mutated in mutations(value[0], f"{path}[0]"):
            yield sub_path, [mutated, *value[1:]]
