"""Generation behind one interface, local or remote: `submit(request) -> async stream of
events`, `abort(id)`, `stats()`.

`local` adapts the engine worker (torch, one thread). `remote` streams from a serving engine
over HTTP in one of three dialects (`openai`, `llama_server`, `ollama`); `routing` spreads
documents over several URLs with failover and an optional local fallback. Nothing in here
but `local` may import torch, and `local` only reaches it through the worker.
"""
