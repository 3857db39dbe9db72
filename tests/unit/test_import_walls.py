"""The walls between rooms (DESIGN.md), read from the source: every import, those inside
functions included, followed through specfill's own modules. Cheap (no imports run), so
they cover lazy imports that an import in a fresh interpreter never reaches."""

from __future__ import annotations

import pytest

from tests.import_walls import direct_imports, heavy_imports, modules_in, reachable

LSP = {"pygls", "lsprotocol"}
HTTP = {"httpx", "requests", "aiohttp", "urllib3", "http"}
TORCH = {"torch", "transformers", "accelerate", "safetensors"}
LOCAL_BACKEND = {"lsp_server.backends.local", "lsp_server.backends.local_runtime"}

# The floors of the house (docs/design.md, "Floors"), lowest first: a room imports only rooms
# on floors below its own, never one beside it or above it. A room is a folder of lsp_server
# or a module at its top; "lsp_server" is the package's own __init__ (its version).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("lsp_server", "kernels", "urls"),
    ("models", "engine"),
    ("syntax", "context"),
    ("config",),
    ("backends",),
    ("completion",),
    ("server", "client"),
    ("bench",),
    ("commands",),
    ("cli",),
    ("__main__",),
)
FLOOR = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}


def is_tree_sitter(package: str) -> bool:
    return package == "tree_sitter" or package.startswith("tree_sitter_")


def room_of(module: str) -> str:
    """`lsp_server.engine.types` -> engine, `lsp_server.config` -> config."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def imports_up_or_sideways(module: str, floor: dict[str, int] = FLOOR) -> list[str]:
    """The specfill modules `module` imports from another room on its own floor or above."""
    room = room_of(module)
    return sorted(name for name in direct_imports(module)
                  if name.split(".")[0] == "lsp_server" and room_of(name) != room
                  and floor[room_of(name)] >= floor[room])


def test_the_checks_see_the_imports_that_are_there():
    # A wall check that finds nothing proves nothing: each kind of import it looks for is
    # found where it really is, through a chain of modules and inside functions.
    assert "torch" in reachable("lsp_server.engine.speculative")[1]
    assert "tree_sitter" in reachable("lsp_server.context.cross_file")[1]  # through context.snippets
    assert "httpx" in reachable("lsp_server.backends.select")[1]  # imported inside a function
    assert LSP <= {name.split(".")[0] for name in direct_imports("lsp_server.server.server")}
    assert "lsp_server.backends.local_runtime" in reachable("lsp_server.server.server")[0]
    assert "lsp_server.syntax.context" not in direct_imports("lsp_server.syntax.indent")


def test_every_room_has_a_floor():
    # A new room (a folder, a module at the top) is placed in FLOORS and in docs/design.md.
    assert sorted({room_of(m) for m in modules_in()} - set(FLOOR)) == []


def test_no_import_runs_up_a_floor_or_sideways():
    found = {m: imports_up_or_sideways(m) for m in modules_in()}
    assert {m: names for m, names in found.items() if names} == {}


def test_the_floor_check_sees_an_import_that_runs_up_or_sideways():
    # A check that finds nothing proves nothing: with the engine a floor above syntax, the
    # policy's import of the stop rule runs up; with both on one floor, it runs sideways.
    policy, rule = "lsp_server.syntax.policy", "lsp_server.engine.stopping"
    assert rule in imports_up_or_sideways(policy, {**FLOOR, "engine": FLOOR["syntax"] + 1})
    assert rule in imports_up_or_sideways(policy, {**FLOOR, "engine": FLOOR["syntax"]})
    assert imports_up_or_sideways(policy) == []


@pytest.mark.parametrize("room", ["engine", "kernels"])
def test_engine_and_kernels_never_import_pygls_tree_sitter_or_http(room):
    ours, outside = reachable(*modules_in(room))
    assert sorted(p for p in outside if p in LSP | HTTP or is_tree_sitter(p)) == []
    assert sorted(m for m in ours if m.startswith(("lsp_server.server", "lsp_server.backends"))) == []


@pytest.mark.parametrize("room", ["syntax", "context"])
def test_syntax_and_context_never_import_torch(room):
    assert sorted(reachable(*modules_in(room))[1] & TORCH) == []


def test_remote_backends_never_import_torch():
    remote = [m for m in modules_in("backends") if m not in LOCAL_BACKEND]
    ours, outside = reachable(*remote)
    assert sorted(outside & TORCH) == [] and sorted(ours & LOCAL_BACKEND) == []


def test_only_the_server_room_and_the_scripted_client_import_pygls():
    others = [m for m in modules_in() if room_of(m) not in ("server", "client")]
    found = {m: sorted(name for name in direct_imports(m) if name.split(".")[0] in LSP) for m in others}
    assert {m: names for m, names in found.items() if names} == {}


def test_the_server_room_holds_only_modules_that_speak_lsp():
    # What a handler calls (the completion service, documents, stats) is a floor down.
    quiet = [m for m in modules_in("server") if m != "lsp_server.server"
             and not {name.split(".")[0] for name in direct_imports(m)} & LSP]
    assert quiet == []


def test_the_completion_room_stands_between_the_backends_and_the_server():
    assert FLOOR["backends"] < FLOOR["completion"] < FLOOR["server"]
    ours = reachable(*modules_in("completion"))[0]
    assert sorted(m for m in ours if room_of(m) in ("server", "client", "bench", "commands")) == []
    assert "lsp_server.completion.service" in reachable("lsp_server.server.server")[0]


def test_the_completion_room_loads_no_pygls():
    assert sorted(p for p in reachable(*modules_in("completion"))[1] if p in LSP) == []


def test_the_context_room_loads_no_torch_or_pygls():
    assert heavy_imports(*modules_in("context")) == []
