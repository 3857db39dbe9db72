"""`specfill doctor` asks at real spots with the server's own prompt and syntax policy."""

from __future__ import annotations

from types import SimpleNamespace

from lsp_server.commands.doctor import REAL_SPOTS, _PROMPTS, doctor_requests
from lsp_server.context.prompt import FimTokens


def test_doctor_builds_the_servers_requests_at_its_spots():
    runtime = SimpleNamespace(encode=lambda text: [ord(c) % 1000 + 10 for c in text],
                              fim=FimTokens(prefix=1, suffix=2, middle=3))
    requests = doctor_requests(runtime)
    assert len(_PROMPTS) <= len(requests) <= len(_PROMPTS) + REAL_SPOTS
    first = requests[0]
    assert first.prompt_ids[0] in (1, 2) and 3 in first.prompt_ids  # a FIM prompt
    assert first.policy.context != "unknown" and first.policy.max_new_tokens > 0
    assert all(r.policy.mode == "adaptive" for r in requests)  # the server's default
