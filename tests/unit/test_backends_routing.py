"""Affinity, settings and key handling of the remote backends (no server needed here; the
real servers are in tests/remote)."""

from __future__ import annotations

from lsp_server.backends.remote import RemoteBackend, RemoteSettings
from lsp_server.backends.routing import affinity_order, session_key
from lsp_server.backends.select import read_api_key
from lsp_server.urls import display_url, insecure_remote
from lsp_server.config import BackendConfig, config_from_options


def remotes(n: int) -> list[RemoteBackend]:
    return [RemoteBackend(RemoteSettings(f"http://127.0.0.1:{9000 + i}", "llama-server"))
            for i in range(n)]


def test_a_document_keeps_its_backend_and_only_a_dead_backends_documents_move():
    backends = remotes(3)
    docs = [f"file:///src/m{i}.py" for i in range(300)]
    first = {d: affinity_order(d, backends)[0] for d in docs}
    assert all(affinity_order(d, backends)[0] is first[d] for d in docs)
    assert len({b.url for b in first.values()}) == 3  # spread over all three
    dead = backends[1]
    alive = [b for b in backends if b is not dead]
    for d in docs:
        now = affinity_order(d, alive)[0]
        if first[d] is not dead:
            assert now is first[d]


def test_session_key_hides_the_path():
    key = session_key("file:///home/me/secret/project.py")
    assert "secret" not in key and len(key) == 32 and key == session_key("file:///home/me/secret/project.py")


def test_urls_are_shown_without_credentials():
    assert display_url("https://user:pw@gpu.example:8443/v1/?token=x") == "https://gpu.example:8443/v1"
    assert insecure_remote("http://10.0.0.5:8000") and not insecure_remote("http://127.0.0.1:8000")
    assert not insecure_remote("https://10.0.0.5:8000")


def test_backend_settings_are_validated():
    config, problems = config_from_options({"backend": {
        "kind": "vllm", "urls": ["ftp://x"], "timeoutS": -1, "fallback": "cloud"}})
    assert config.backend == BackendConfig()
    assert any("backend.kind must be one of local, openai, llama-server, ollama" in p for p in problems)
    assert any("backend.urls must be http(s)" in p for p in problems)
    assert any("backend.timeoutS" in p for p in problems) and any("backend.fallback" in p for p in problems)


def test_plain_http_to_another_host_needs_the_explicit_setting():
    options = {"backend": {"kind": "openai", "urls": "http://10.1.2.3:8000"}}
    _, problems = config_from_options(options)
    assert any("plain http to another machine" in p for p in problems)
    options["backend"]["allowInsecureHttp"] = True
    config, problems = config_from_options(options)
    assert not problems and config.backend.urls == ("http://10.1.2.3:8000",)


def test_api_key_from_env_or_file_and_never_in_the_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECFILL_TEST_KEY", "sk-secret-1")
    assert read_api_key(BackendConfig(apiKeyEnv="SPECFILL_TEST_KEY")) == ("sk-secret-1", None)
    key_file = tmp_path / "key"
    key_file.write_text("sk-secret-2\n")
    assert read_api_key(BackendConfig(apiKeyFile=str(key_file))) == ("sk-secret-2", None)
    key, problem = read_api_key(BackendConfig(apiKeyEnv="SPECFILL_UNSET_KEY"))
    assert key is None and "SPECFILL_UNSET_KEY" in problem


def test_remote_errors_scrub_the_key():
    backend = RemoteBackend(RemoteSettings("http://127.0.0.1:1", "openai", api_key="sk-live-123"))
    error = backend._http_error(401, b'{"error":{"message":"bad key sk-live-123"}}')
    assert "sk-live-123" not in str(error) and error.kind == "auth"
    assert "backend.apiKeyEnv" in str(error)


def test_remote_backends_do_not_import_torch_or_pygls():
    from tests.import_walls import heavy_imports

    assert heavy_imports("lsp_server.backends.remote", "lsp_server.backends.routing",
                         "lsp_server.backends.select") == []
