"""Parsing each serving engine's streamed responses, on recorded response shapes.

The llama-server shapes are what the server built by scripts/build-llama-server.sh sends (and
tests/remote checks them live); the vLLM and Ollama shapes are transcribed from their API
docs and code (vLLM's CompletionStreamResponse / UsageInfo and its per-request speculative
decoding metrics; Ollama's /api/generate NDJSON), not captured from running servers.
"""

from __future__ import annotations

import json

import pytest

from lsp_server.backends.base import BackendRequest
from lsp_server.backends.llama_server import LlamaServer
from lsp_server.backends.ollama import Ollama
from lsp_server.backends.openai import OpenAI
from lsp_server.backends.wire import RemoteError, error_message, sse_payload
from lsp_server.engine.types import CompletionRequest, DraftPolicy

VLLM_STREAM = [
    'data: {"id":"cmpl-3f1","object":"text_completion","created":1733000000,"model":"qwen-7b",'
    '"choices":[{"index":0,"text":"    return","logprobs":null,"finish_reason":null,'
    '"stop_reason":null}],"usage":null}',
    '',
    'data: {"id":"cmpl-3f1","object":"text_completion","created":1733000000,"model":"qwen-7b",'
    '"choices":[{"index":0,"text":" a + b","logprobs":null,"finish_reason":"stop",'
    '"stop_reason":null}],"usage":null}',
    'data: {"id":"cmpl-3f1","object":"text_completion","created":1733000000,"model":"qwen-7b",'
    '"choices":[],"usage":{"prompt_tokens":412,"total_tokens":418,"completion_tokens":6,'
    '"prompt_tokens_details":{"cached_tokens":400}},'
    '"metrics":{"speculative_decoding":{"num_spec_steps":3,"num_draft_tokens":15,'
    '"num_accepted_draft_tokens":4}}}',
    'data: [DONE]',
]

OLLAMA_STREAM = [
    '{"model":"qwen2.5-coder:7b","created_at":"2024-12-01T10:00:00.1Z","response":"    return",'
    '"done":false}',
    '{"model":"qwen2.5-coder:7b","created_at":"2024-12-01T10:00:00.2Z","response":" a + b",'
    '"done":false}',
    '{"model":"qwen2.5-coder:7b","created_at":"2024-12-01T10:00:00.3Z","response":"","done":true,'
    '"done_reason":"stop","total_duration":312000000,"load_duration":2100000,'
    '"prompt_eval_count":412,"prompt_eval_duration":120000000,"eval_count":6,'
    '"eval_duration":90000000}',
]

LLAMA_SERVER_FINAL = (
    'data: {"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"model":"qwen",'
    '"tokens_predicted":6,"tokens_evaluated":412,"stop_type":"eos","stopping_word":"",'
    '"tokens_cached":417,"timings":{"cache_n":400,"prompt_n":12,"prompt_ms":80.1,'
    '"prompt_per_token_ms":6.7,"prompt_per_second":149.8,"predicted_n":6,"predicted_ms":150.2,'
    '"predicted_per_token_ms":25.0,"predicted_per_second":39.9,"draft_n":10,'
    '"draft_n_accepted":5}}')


def parse_all(dialect, lines):
    chunks = []
    for line in lines:
        payload = sse_payload(line) if dialect.framing == "sse" else line
        if payload is not None and (chunk := dialect.parse(payload)) is not None:
            chunks.append(chunk)
    return chunks


def usage_of(chunks):
    from lsp_server.backends.wire import Usage
    usage = Usage()
    for c in chunks:
        usage.merge(c.usage)
    return usage


def test_vllm_stream_gives_text_usage_cached_tokens_and_draft_counts():
    chunks = parse_all(OpenAI(), VLLM_STREAM)
    assert "".join(c.text for c in chunks) == "    return a + b"
    assert chunks[-1].done and chunks[1].finish_reason == "stop"
    usage = usage_of(chunks)
    assert (usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens) == (412, 400, 6)
    assert (usage.draft_tokens, usage.accepted_draft_tokens) == (15, 4)


def test_vllm_without_spec_metrics_leaves_draft_counts_unknown():
    line = ('data: {"id":"c","object":"text_completion","choices":[],"usage":'
            '{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2}}')
    usage = usage_of(parse_all(OpenAI(), [line]))
    assert usage.prompt_tokens == 5 and usage.cached_prompt_tokens is None
    assert usage.draft_tokens is None


def test_vllm_error_event_inside_the_stream_is_an_error():
    line = 'data: {"error":{"object":"error","message":"prompt too long","type":"BadRequestError","code":400}}'
    with pytest.raises(RemoteError, match="prompt too long"):
        parse_all(OpenAI(), [line])


def test_ollama_ndjson_gives_text_and_counts_without_draft_numbers():
    chunks = parse_all(Ollama(), OLLAMA_STREAM)
    assert "".join(c.text for c in chunks) == "    return a + b"
    assert chunks[-1].done and chunks[-1].finish_reason == "stop"
    usage = usage_of(chunks)
    assert (usage.prompt_tokens, usage.completion_tokens) == (412, 6)
    assert usage.draft_tokens is None and usage.cached_prompt_tokens is None


def test_ollama_error_line_is_an_error():
    with pytest.raises(RemoteError, match="model 'x' not found"):
        parse_all(Ollama(), ['{"error":"model \'x\' not found"}'])


def test_llama_server_final_chunk_counts_prompt_as_cached_plus_processed():
    (chunk,) = parse_all(LlamaServer(), [LLAMA_SERVER_FINAL])
    assert chunk.done and chunk.finish_reason == "eos"
    u = chunk.usage
    assert (u.prompt_tokens, u.cached_prompt_tokens, u.completion_tokens) == (412, 400, 6)
    assert (u.draft_tokens, u.accepted_draft_tokens) == (10, 5)


def test_llama_server_without_drafting_reports_zero_drafted():
    final = json.loads(LLAMA_SERVER_FINAL[len("data: "):])
    del final["timings"]["draft_n"], final["timings"]["draft_n_accepted"]
    (chunk,) = parse_all(LlamaServer(), ["data: " + json.dumps(final)])
    assert chunk.usage.draft_tokens == 0 and chunk.usage.accepted_draft_tokens == 0


def request(**policy) -> BackendRequest:
    return BackendRequest(CompletionRequest("r1", (), DraftPolicy(**policy), 0.0, 1.0),
                          "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", ("\n",), "file:///a.py")


def test_bodies_carry_the_prompt_text_budget_stops_and_session():
    r = request(max_new_tokens=32, k_max=6, k_min=1, draft_p_min=0.6)
    ls = LlamaServer().body(r, "", "s1")
    assert ls["prompt"] == r.prompt_text and ls["n_predict"] == 32 and ls["stop"] == ["\n"]
    assert ls["cache_prompt"] is True and ls["stream"] is True
    assert ls["speculative.n_max"] == 6 and ls["speculative.p_min"] == 0.6
    oa = OpenAI().body(r, "qwen-7b", "s1")
    assert oa["model"] == "qwen-7b" and oa["max_tokens"] == 32 and "suffix" not in oa
    assert oa["session_id"] == "s1" and oa["stream_options"] == {"include_usage": True}
    ol = Ollama().body(r, "qwen2.5-coder:7b", "s1")
    assert ol["raw"] is True and ol["options"]["num_predict"] == 32


def test_speculation_off_sends_no_drafting():
    assert LlamaServer().body(request(mode="off"), "", "s")["speculative.n_max"] == 0


def test_error_messages_come_from_the_servers_own_words():
    assert error_message(b'{"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}') == "Invalid API Key"
    assert error_message(b'{"detail":"Not Found"}') == "Not Found"
    assert error_message(b"plain text") == "plain text"


def test_streamed_text_is_cut_by_the_policy_rule_stop_strings_and_control_tokens():
    from lsp_server.backends.remote import _cut
    from lsp_server.engine.types import StopRule

    block = BackendRequest(CompletionRequest("r", (), DraftPolicy(stop=StopRule("block", 0))), "x")
    text = "x = 1\n    return x\ndef other():"
    assert text[:_cut(text, block)] == "x = 1\n    return x"
    assert _cut("    y = 2\n", block) is None  # nothing dedented yet: keep streaming
    assert _cut("a + b<|endoftext|>junk", block) == len("a + b")
    line = BackendRequest(CompletionRequest("r", (), DraftPolicy(stop=StopRule("line"))), "x", ("\n",))
    assert _cut("radius * 2\nmore", line) == len("radius * 2")


# vLLM's Prometheus exposition for its speculative decoding counters (labels per engine and
# model), as its metrics docs list them; transcribed, not captured.
VLLM_METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="qwen-7b"} 120.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="qwen-7b"} 600.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="qwen-7b"} 50.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="qwen-7b"} 410.0
vllm:num_requests_running{engine="0",model_name="qwen-7b"} 1.0
"""


def test_prometheus_spec_counters_are_summed_over_engines():
    from lsp_server.backends.wire import prometheus_counters

    counters = prometheus_counters(VLLM_METRICS)
    assert counters == {"spec_decode_num_drafts_total": 120.0,
                        "spec_decode_num_draft_tokens_total": 650.0,
                        "spec_decode_num_accepted_tokens_total": 410.0}
    llama = "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\nllamacpp:spec_decode_num_draft_tokens_total 26\n"
    assert prometheus_counters(llama) == {"spec_decode_num_draft_tokens_total": 26.0}
