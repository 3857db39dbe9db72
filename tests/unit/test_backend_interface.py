"""The completion service talks to generation only through `backends.base.Backend`: the local
engine and the remote router each implement all of it (issue 52), so the service never
reaches past it for a worker."""

from __future__ import annotations

import inspect

import pytest

from lsp_server.backends.base import Backend, BackendStatus
from lsp_server.backends.local import LocalBackend
from lsp_server.backends.routing import Router

METHODS = sorted(name for name, value in vars(Backend).items()
                 if not name.startswith("_") and inspect.isfunction(value))


def test_the_interface_has_the_background_work_and_status_the_service_calls():
    assert {"warm", "precompute", "preempt_background", "status"} <= set(METHODS)
    assert "keeps_lineages" in Backend.__annotations__


@pytest.mark.parametrize("backend", [LocalBackend, Router])
def test_each_backend_implements_every_method_of_the_interface(backend):
    assert [name for name in METHODS if not inspect.isfunction(getattr(backend, name, None))] == []
    assert isinstance(backend.keeps_lineages, bool)


def test_only_the_local_engine_keeps_lineages():
    assert LocalBackend.keeps_lineages and not Router.keeps_lineages


class FallbackEngine:
    def status(self) -> BackendStatus:
        return BackendStatus(True, None, threads=2, draft_pool={"tokens": 5})


def test_the_router_is_ready_when_its_settings_are_and_reports_its_fallback_engine():
    assert Router([], lambda message: None).status() == BackendStatus(True, None)
    refused = Router([], lambda message: None, problem="no urls").status()
    assert (refused.ready, refused.load_error) == (False, "no urls")
    status = Router([], lambda message: None, FallbackEngine(), problem="no urls").status()
    assert (status.ready, status.load_error, status.threads, status.draft_pool) == \
        (False, "no urls", 2, {"tokens": 5})
