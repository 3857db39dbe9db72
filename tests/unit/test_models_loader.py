"""Loading: where a spec points, dtype/device choice, tokenizer agreement, clear failures."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from lsp_server.models import fetch, loader
from lsp_server.models.errors import ModelError, ModelNotFoundError, TokenizerMismatchError
from lsp_server.models.registry import ModelPaths, get_model

SPECIALS = ["<unk>", "<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"]
WORDS = ["def", "return", "(", ")", ":"]


def word_tokenizer(tokens: list[str]) -> PreTrainedTokenizerFast:
    model = Tokenizer(WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="<unk>"))
    model.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=model, unk_token="<unk>", eos_token="<|endoftext|>")


def save_tiny_model(directory: Path, tokenizer: PreTrainedTokenizerFast, vocab_size: int = 64, seed: int = 0) -> Path:
    config = Qwen2Config(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


# ---------------------------------------------------------------- tokenizer agreement


def test_identical_tokenizers_agree():
    assert loader.tokenizer_differences(word_tokenizer(SPECIALS + WORDS), word_tokenizer(SPECIALS + WORDS)) == []


def test_extra_tokens_beyond_the_shared_range_are_fine():
    small, large = word_tokenizer(SPECIALS + WORDS), word_tokenizer(SPECIALS + WORDS + ["extra", "more"])
    loader.check_tokenizers_agree(large, small, "big", "small")


def test_swapped_ids_raise_an_error_naming_both_models():
    swapped = SPECIALS + [WORDS[1], WORDS[0], *WORDS[2:]]
    with pytest.raises(TokenizerMismatchError, match=r"target tgt-model and draft drf-model .*2 of 10 shared token ids differ"):
        loader.check_tokenizers_agree(word_tokenizer(SPECIALS + WORDS), word_tokenizer(swapped), "tgt-model", "drf-model")


def test_a_fim_token_at_another_id_is_reported():
    a = word_tokenizer(["<unk>", "<|endoftext|>", "x", "<|fim_middle|>"])
    b = word_tokenizer(["<unk>", "<|endoftext|>", "x", "y", "<|fim_middle|>"])
    differences = loader.tokenizer_differences(a, b)
    assert "special token '<|fim_middle|>' is id 3 vs 4" in differences


def test_special_token_ids_are_read_from_the_tokenizer():
    ids = loader.special_token_ids(word_tokenizer(SPECIALS + WORDS))
    assert ids == {"<|fim_prefix|>": 2, "<|fim_suffix|>": 4, "<|fim_middle|>": 3, "<|endoftext|>": 1}


# ---------------------------------------------------------------- dtype and device


def test_cpu_bf16_detection_reads_cpu_flags():
    assert loader.cpu_supports_bf16("flags\t\t: fpu sse2 avx512f avx512_bf16 amx_tile\n")
    assert loader.cpu_supports_bf16("Features\t: fp asimd bf16 i8mm\n")
    assert not loader.cpu_supports_bf16("flags\t\t: fpu sse2 avx2 avx512f\n")


@pytest.mark.parametrize("native_bf16, expected", [(True, torch.bfloat16), (False, torch.float32)])
def test_auto_on_cpu_picks_bf16_only_where_native(monkeypatch, native_bf16, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(loader, "cpu_supports_bf16", lambda: native_bf16)
    assert loader.resolve_dtype_device("auto", "auto") == (expected, torch.device("cpu"))


def test_explicit_dtype_names_are_understood():
    assert loader.resolve_dtype_device("fp32", "cpu")[0] is torch.float32
    assert loader.resolve_dtype_device("bfloat16", "cpu")[0] is torch.bfloat16
    assert loader.resolve_dtype_device(torch.float16, "cpu")[0] is torch.float16
    with pytest.raises(ModelError, match="unknown dtype 'int3'"):
        loader.resolve_dtype_device("int3", "cpu")


def test_asking_for_cuda_without_it_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ModelError, match="no CUDA device"):
        loader.resolve_dtype_device("auto", "cuda")


# ---------------------------------------------------------------- where a spec points


def test_a_registry_model_not_yet_fetched_says_run_fetch(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"not on disk .*specfill models fetch"):
        loader.resolve_source("qwen2.5-coder-1.5b", tmp_path)


def test_a_registry_model_changed_since_fetch_is_refused(tmp_path):
    spec = get_model("qwen2.5-coder-0.5b")
    hf = ModelPaths.of(tmp_path, spec).hf
    hf.mkdir(parents=True)
    (hf / "config.json").write_text("{}")
    with pytest.raises(ModelNotFoundError, match="changed or are incomplete.*specfill models fetch"):
        loader.resolve_source(spec.name, tmp_path)


def test_a_fetched_registry_model_resolves_to_its_converted_copy(tmp_path):
    spec = get_model("qwen2.5-coder-0.5b")
    paths = ModelPaths.of(tmp_path, spec)
    save_tiny_model(paths.hf, word_tokenizer(SPECIALS + WORDS))
    files = {p.name: fetch.file_record(p, hashlib.sha256(p.read_bytes()).hexdigest()) for p in paths.hf.iterdir()}
    fetch.write_marker(paths.marker, {"hf": {"source_sha256": spec.source.sha256, "files": files}})
    source = loader.resolve_source(spec.name, tmp_path)
    assert (source.kind, source.path) == ("registry", paths.hf)


def test_the_cache_dir_comes_from_the_environment_when_not_given(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECFILL_CACHE", str(tmp_path / "env-cache"))
    with pytest.raises(ModelNotFoundError, match="env-cache"):
        loader.resolve_source("qwen2.5-coder-1.5b")


def test_unknown_specs_list_the_registered_models(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"qwen2\.5-coder-0\.5b.*does not exist"):
        loader.resolve_source(str(tmp_path / "nope"))


def test_a_directory_without_config_is_not_a_model(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        loader.resolve_source(str(tmp_path))


def test_a_gguf_file_is_recognised(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert loader.resolve_source(str(gguf)).kind == "gguf"


# ---------------------------------------------------------------- loading tiny models


def test_load_model_gives_an_eval_model_without_grad_and_counts_bytes(tmp_path):
    directory = save_tiny_model(tmp_path / "m", word_tokenizer(SPECIALS + WORDS), vocab_size=64)
    loaded = loader.load_model(str(directory), dtype="fp32", device="cpu")
    assert not loaded.model.training
    assert not any(p.requires_grad for p in loaded.model.parameters())
    params = sum(p.numel() for p in loaded.model.parameters())
    assert loaded.info.parameters == params and loaded.info.parameter_bytes == 4 * params
    assert loaded.info.vocab_size == 64  # padded beyond the 10-token tokenizer
    assert loaded.tokenizer.convert_tokens_to_ids("def") == 5


def test_corrupt_weights_raise_a_model_error_naming_the_path(tmp_path):
    directory = save_tiny_model(tmp_path / "m", word_tokenizer(SPECIALS + WORDS))
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(ModelError, match=f"could not load .*{directory}"):
        loader.load_model(str(directory), dtype="fp32", device="cpu")


def test_load_pair_refuses_mismatched_tokenizers_before_loading_weights(tmp_path, monkeypatch):
    target = save_tiny_model(tmp_path / "t", word_tokenizer(SPECIALS + WORDS))
    draft = save_tiny_model(tmp_path / "d", word_tokenizer(SPECIALS + WORDS[::-1]))

    def must_not_load(*args, **kwargs):
        raise AssertionError("weights were loaded before the tokenizer check")

    monkeypatch.setattr(loader, "load_weights", must_not_load)
    with pytest.raises(TokenizerMismatchError, match=f"target {target} and draft {draft}"):
        loader.load_pair(str(target), str(draft), dtype="fp32", device="cpu")


def test_load_pair_returns_both_models_the_shared_tokenizer_and_memory_info(tmp_path):
    tokens = SPECIALS + WORDS
    target = save_tiny_model(tmp_path / "t", word_tokenizer(tokens), vocab_size=64, seed=1)
    draft = save_tiny_model(tmp_path / "d", word_tokenizer(tokens + ["only-in-draft"]), vocab_size=32, seed=2)
    pair = loader.load_pair(str(target), str(draft), dtype="bf16", device="cpu")
    assert pair.dtype is torch.bfloat16 and pair.device == torch.device("cpu")
    assert next(pair.target.parameters()).dtype is torch.bfloat16
    assert pair.stop_ids == (1,)
    assert pair.info.target.vocab_size == 64 and pair.info.draft.vocab_size == 32
    assert pair.info.rss_bytes > 0
    assert any(line.startswith("target: ") for line in pair.info.lines())


def test_identical_tokenizer_files_skip_loading_the_drafts_tokenizer(tmp_path, monkeypatch):
    tokens = SPECIALS + WORDS
    target = save_tiny_model(tmp_path / "t", word_tokenizer(tokens), seed=1)
    draft = save_tiny_model(tmp_path / "d", word_tokenizer(tokens), seed=2)
    loaded_from: list[Path] = []
    real_load = loader.load_tokenizer

    def counting_load(source, trust_remote_code=False):
        loaded_from.append(source.path)
        return real_load(source, trust_remote_code)

    monkeypatch.setattr(loader, "load_tokenizer", counting_load)
    loader.load_pair(str(target), str(draft), dtype="fp32", device="cpu")
    assert loaded_from == [target]
    (draft / "tokenizer_config.json").write_text((draft / "tokenizer_config.json").read_text() + " ")
    loader.load_pair(str(target), str(draft), dtype="fp32", device="cpu")
    assert loaded_from == [target, target, draft]


def test_a_pickled_checkpoint_is_refused_safetensors_only(tmp_path):
    from lsp_server.models.errors import ModelError
    from lsp_server.models.loader import load_model
    from tests.tiny_hf import tiny_causal_lm, tiny_tokenizer

    model_dir = tmp_path / "pickled"
    model = tiny_causal_lm(3, 300, 16, 1)
    model.save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    for weights in model_dir.glob("*.safetensors"):  # the same weights, as a pickle
        weights.unlink()
    torch.save(model.state_dict(), model_dir / "pytorch_model.bin")
    with pytest.raises(ModelError):
        load_model(str(model_dir), dtype="fp32", device="cpu")
