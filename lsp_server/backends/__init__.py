"""Generation behind one interface, local or remote: `submit(request) -> async stream of
events`, `abort(id)`, `stats()`.

`local` adapts the engine worker (torch, one thread). `remote` streams from a serving engine
over HTTP in one of three dialects (`openai`, `llama_server`, `ollama`); `routing` spreads
documents over several URLs with failover and an optional local fallback. `local_runtime`
builds the local engine from the configuration on the worker thread (models, kernels,
engine). Nothing in here but those two may import torch, and `local` only reaches it through
the worker.
"""
