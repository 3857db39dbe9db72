"""Remote backends get what the local engine gets (issue 26), the parts that need no server:
other files' chunks in the text prompt, in Qwen's repository-level layout and a stable order;
the warm's steps; the warm bodies; metering of evaluated and cached prompt tokens; a warm to
a server that is down. The real llama-server behaviour is in tests/remote/test_warm_real.py."""

from __future__ import annotations

import asyncio
import socket

from hypothesis import given, strategies as st

from lsp_server.backends.base import BackendRequest
from lsp_server.backends.llama_server import LlamaServer
from lsp_server.backends.metering import BackendMeter
from lsp_server.backends.ollama import Ollama
from lsp_server.backends.openai import OpenAI
from lsp_server.backends.prompt_text import PIECE, TextCodec
from lsp_server.backends.remote import RemoteBackend, RemoteSettings
from lsp_server.backends.routing import Router
from lsp_server.backends.warming import WarmOutcome, steps_to_send, warm_cuts
from lsp_server.backends.wire import Usage
from lsp_server.completion.documents import DocumentStore
from lsp_server.completion.prompts import Cursor
from lsp_server.completion.service import CompletionService
from lsp_server.completion.stats import ServerStats
from lsp_server.config import config_from_options
from lsp_server.engine.types import CompletionRequest, DraftPolicy
from tests.unit.test_snippets import SHAPES

MAIN = '''from .shapes import area, Circle


def report(c):
    total = area(c.radius)
    return tot'''


def service(extra_tokens: int = 500) -> tuple[CompletionService, DocumentStore]:
    docs = DocumentStore()
    config, problems = config_from_options({"contextWindow": {"extraTokens": extra_tokens}})
    assert not problems
    svc = CompletionService(docs, lambda: None, lambda: config, lambda update: None,
                            lambda *a, **k: None, ServerStats())
    svc.roots = ["/w"]
    return svc, docs


def remote_prompt(svc: CompletionService, docs: DocumentStore, uri: str, line: int, col: int):
    doc = docs.get(uri)
    return svc._prepare(doc, Cursor(uri, doc.version, line, col), "utf-16", svc.config_ref(),
                        TextCodec().as_prompt_codec()).request


def test_a_remote_prompt_carries_the_open_files_in_the_repository_level_layout():
    svc, docs = service()
    docs.open("file:///w/pkg/shapes.py", "python", 1, SHAPES)
    docs.open("file:///w/pkg/main.py", "python", 1, MAIN)
    request = remote_prompt(svc, docs, "file:///w/pkg/main.py", 5, 14)
    text = request.prompt_text
    assert text.startswith("<|repo_name|>w\n<|file_sep|>pkg/shapes.py\n")
    assert "def area(radius):" in text and "class Circle:" in text
    head, fim = text.split("<|file_sep|>pkg/main.py\n")
    assert fim.startswith("<|fim_prefix|>") and "<|fim_middle|>" in fim
    assert request.plain_text == fim  # the same prompt without other files, for a refusal


def test_typing_only_appends_to_the_remote_prompt_so_the_server_cache_holds():
    svc, docs = service()
    docs.open("file:///w/pkg/shapes.py", "python", 1, SHAPES)
    docs.open("file:///w/pkg/main.py", "python", 1, MAIN)
    before = remote_prompt(svc, docs, "file:///w/pkg/main.py", 5, 14).prompt_text
    docs.open("file:///w/pkg/main.py", "python", 2, MAIN + "a")
    after = remote_prompt(svc, docs, "file:///w/pkg/main.py", 5, 15).prompt_text
    # psm-line: everything up to the cursor line stays; the line grows at the end.
    assert after.startswith(before[:before.rindex("\n")]) and after.endswith("return tota")


def test_without_extra_tokens_or_other_files_the_prompt_is_the_file_alone():
    svc, docs = service(extra_tokens=0)
    docs.open("file:///w/pkg/shapes.py", "python", 1, SHAPES)
    docs.open("file:///w/pkg/main.py", "python", 1, MAIN)
    request = remote_prompt(svc, docs, "file:///w/pkg/main.py", 5, 14)
    assert request.prompt_text.startswith("<|fim_prefix|>") and request.plain_text == ""


@given(st.text(alphabet=st.sampled_from("ab_ 1(\n\t:"), max_size=600), st.integers(1, 40))
def test_warm_steps_end_lines_grow_and_finish_with_the_whole_prompt(text, step):
    cuts = warm_cuts(text, step)
    assert cuts[-1] == len(text) and cuts == sorted(set(cuts))
    for cut in cuts[:-1]:
        assert text[cut - 1] == "\n"
    for start, end in zip([0, *cuts], cuts):
        lines = text[start:end].split("\n")
        if all(len(PIECE.findall(line)) < step // 2 for line in lines):  # short lines
            assert len(PIECE.findall(text[start:end])) <= step + 1


def test_a_warm_sends_only_the_steps_past_what_the_server_holds():
    text = "".join(f"line_{i} = value + {i}\n" for i in range(100))
    every = warm_cuts(text, 32)
    assert steps_to_send(text, "", 32) == every
    held = text[:every[3] + 5] + "something else"  # the cache diverges inside step 5
    assert steps_to_send(text, held, 32) == every[4:]
    # A cache holding the prompt and a completion after it: nothing to send (a step that is
    # all cached would cut llama-server's cache back to it).
    assert steps_to_send(text, text + "    return x\n", 32) == []


def test_warm_bodies_fill_the_cache_and_generate_nothing():
    ls = LlamaServer().warm_body("<|fim_prefix|>x", "", "s")
    assert ls == {"prompt": "<|fim_prefix|>x", "n_predict": 0, "cache_prompt": True, "stream": False}
    oa = OpenAI().warm_body("p", "qwen", "s")
    assert oa["max_tokens"] == 1 and oa["model"] == "qwen" and oa["stream"] is False
    assert Ollama().warm_body("p", "m", "s") is None  # keeps prefilling after a disconnect


def test_warm_answers_are_metered_from_the_servers_own_numbers():
    timings = {"content": "", "stop": True, "timings": {"prompt_n": 40, "cache_n": 600, "predicted_n": 0}}
    u = LlamaServer().warm_usage(timings)
    assert (u.prompt_tokens, u.cached_prompt_tokens) == (640, 600)
    vllm = {"choices": [{"text": "x"}], "usage": {"prompt_tokens": 700, "completion_tokens": 1,
                                                  "prompt_tokens_details": {"cached_tokens": 688}}}
    u = OpenAI().warm_usage(vllm)
    assert (u.prompt_tokens, u.cached_prompt_tokens) == (700, 688)


def test_the_meter_reports_evaluated_and_cached_prompt_tokens_per_request_and_warm():
    meter = BackendMeter("llama-server x", "llama-server", "x")
    meter.add_request(Usage(prompt_tokens=640, cached_prompt_tokens=630, completion_tokens=5))
    meter.add_request(Usage(prompt_tokens=200, cached_prompt_tokens=0, completion_tokens=5))
    meter.add_warm(WarmOutcome("warm", steps=3, prompt_tokens=700, evaluated_tokens=690,
                               cached_tokens=10, generated_tokens=3))
    line = meter.to_json(True)
    assert (line["prompt_tokens"], line["cached_prompt_tokens"], line["evaluated_prompt_tokens"]) == (840, 630, 210)
    assert line["last_request"] == {"prompt_tokens": 200, "cached_prompt_tokens": 0,
                                    "evaluated_prompt_tokens": 200}
    assert line["warms"] == {"warm": 1, "steps": 3, "evaluated_prompt_tokens": 690,
                             "cached_prompt_tokens": 10, "generated_tokens": 3}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


def test_a_warm_to_a_server_that_is_down_counts_in_its_health_and_tells_no_one():
    told: list[str] = []

    async def scenario():
        backend = RemoteBackend(RemoteSettings(f"http://127.0.0.1:{closed_port()}", "llama-server"))
        router = Router([backend], told.append)
        outcomes: list[WarmOutcome] = []
        request = BackendRequest(CompletionRequest("r", (), DraftPolicy()), "<|fim_prefix|>x\n",
                                 affinity="file:///a.py")
        assert router.warm(request, outcomes.append)
        await backend.warming.task
        assert not router.warm(request)  # down now: no second warm until its health check passes
        router.stop()
        return backend, outcomes

    backend, outcomes = asyncio.run(scenario())
    assert [o.reason for o in outcomes] == ["error"]
    assert not backend.healthy and backend.meter.errors["connect"] == 1
    assert backend.warming.enabled  # down is not a refusal: warming resumes when it is back
    assert told == []


def test_healed_whitespace_stays_cut_from_a_remote_prompt_and_the_output_must_start_with_it():
    from lsp_server.backends.remote import _healed

    svc, docs = service(extra_tokens=0)
    docs.open("file:///w/pkg/main.py", "python", 1, "def f(x):\n    y = x\n        ")
    request = remote_prompt(svc, docs, "file:///w/pkg/main.py", 2, 8)
    # the indentation's last space is what a word's token takes: cut, as the local ids are
    assert request.heal == " " and request.prompt_text.endswith("    y = x\n" + " " * 7)
    assert _healed("", " ") == "" and _healed(" ", " ") == ""
    assert _healed(" return y", " ") == "return y"
    assert _healed("return y", " ") is None  # not the cursor's indentation: no answer
    # a word's start is written back into the prompt (a server cannot be made to spell it)
    docs.open("file:///w/pkg/main.py", "python", 2, MAIN)
    word = remote_prompt(svc, docs, "file:///w/pkg/main.py", 5, 14)
    assert word.heal == "" and word.prompt_text.endswith("return tot")
