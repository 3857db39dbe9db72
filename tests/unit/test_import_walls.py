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


def is_tree_sitter(package: str) -> bool:
    return package == "tree_sitter" or package.startswith("tree_sitter_")


def test_the_checks_see_the_imports_that_are_there():
    # A wall check that finds nothing proves nothing: each kind of import it looks for is
    # found where it really is, through a chain of modules and inside functions.
    assert "torch" in reachable("lsp_server.engine.speculative")[1]
    assert "tree_sitter" in reachable("lsp_server.context.cross_file")[1]  # through context.snippets
    assert "httpx" in reachable("lsp_server.backends.select")[1]  # imported inside a function
    assert LSP <= {name.split(".")[0] for name in direct_imports("lsp_server.server.server")}
    assert "lsp_server.backends.local_runtime" in reachable("lsp_server.server.server")[0]
    assert "lsp_server.syntax.context" not in direct_imports("lsp_server.syntax.indent")


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


def test_only_the_server_room_imports_pygls():
    others = [m for m in modules_in() if not m.startswith("lsp_server.server")]
    found = {m: sorted(name for name in direct_imports(m) if name.split(".")[0] in LSP) for m in others}
    assert {m: names for m, names in found.items() if names} == {}


def test_the_context_room_loads_no_torch_or_pygls():
    assert heavy_imports(*modules_in("context")) == []
