# specfill — `make help` lists the targets.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SPECFILL := $(BIN)/specfill
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}'

$(BIN)/specfill: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $@

setup: $(BIN)/specfill ## create .venv and install specfill with its dev dependencies

models: setup ## fetch, verify and convert the default model pair (idempotent)
	$(SPECFILL) models fetch

.PHONY: help setup models
