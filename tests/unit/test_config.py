"""Settings from the client: defaults, nested camelCase keys, bad values reported and replaced."""

from __future__ import annotations

import pytest

from lsp_server.config import Config, config_from_options, model_identity


def test_no_options_gives_the_defaults():
    config, problems = config_from_options(None)
    assert config == Config() and problems == []


def test_nested_settings_apply_over_the_base():
    base, _ = config_from_options({"maxNewTokens": 32})
    config, problems = config_from_options(
        {"speculation": {"mode": "fixed", "k": 5}, "contextWindow": {"suffixTokens": 128}}, base)
    assert problems == []
    assert config.maxNewTokens == 32  # kept from the base
    assert config.speculation.mode == "fixed" and config.speculation.k == 5
    assert config.contextWindow.suffixTokens == 128


@pytest.mark.parametrize("options,fragment", [
    ({"temperature": "hot"}, "temperature must be a float"),
    ({"temperature": 9.0}, "temperature must be between"),
    ({"speculation": {"mode": "turbo"}}, "speculation.mode must be one of"),
    ({"model": {"device": "tpu"}}, "model.device must be auto, cpu or cuda"),
    ({"model": {"quant": "int3"}}, "model.quant must be auto, gguf or bf16"),
    ({"model": {"draftQuant": "w8a8"}}, "model.draftQuant 'w8a8' is no longer offered"),
    ({"model": {"quant": "int4-g32"}}, "native kernels replaced zentorch's W8A8 and torch's int4"),
    ({"maxNewTokens": True}, "maxNewTokens must be a int"),
    ({"model": "big"}, "model must be an object"),
    ({"colour": "blue"}, "unknown setting 'colour'"),
])
def test_a_bad_value_is_reported_and_the_default_kept(options, fragment):
    config, problems = config_from_options(options)
    assert any(fragment in p for p in problems), problems
    assert config == Config()


@pytest.mark.parametrize("tag", ["auto", "gguf", "bf16"])
def test_every_weights_tag_the_config_offers_is_accepted(tag):
    config, problems = config_from_options({"model": {"quant": tag, "draftQuant": tag}})
    assert problems == [] and config.model.quant == config.model.draftQuant == tag


def test_model_identity_changes_only_with_model_settings():
    a = Config()
    b, _ = config_from_options({"maxNewTokens": 12})
    c, _ = config_from_options({"model": {"draftQuant": "bf16"}})
    assert model_identity(a) == model_identity(b) != model_identity(c)


def test_config_does_not_import_torch():
    from tests.import_walls import heavy_imports

    assert "torch" not in heavy_imports("lsp_server.config", "lsp_server.completion.protocol")


def test_a_bad_change_keeps_the_value_in_force_and_says_so():
    base, _ = config_from_options({"temperature": 0.2, "model": {"threads": 2}})
    config, problems = config_from_options({"temperature": "hot", "model": {"threads": -3}}, base)
    assert config.temperature == 0.2 and config.model.threads == 2
    assert any("keeping 0.2" in p for p in problems) and any("keeping 2" in p for p in problems)
    assert not any("default" in p for p in problems)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1e308, 10**30])
def test_numbers_out_of_range_nan_and_infinity_are_refused(value):
    config, problems = config_from_options({"topP": value, "maxDocumentMB": value})
    assert config.topP == Config().topP and config.maxDocumentMB == Config().maxDocumentMB
    assert len(problems) == 2


def test_cross_file_and_warm_settings_are_validated():
    config, problems = config_from_options(
        {"contextWindow": {"extraTokens": -5, "extraSources": "everything"}, "warm": "yes"})
    assert config.contextWindow.extraTokens == 0 and config.contextWindow.extraSources == "all"
    assert config.warm is True and len(problems) == 3
    config, problems = config_from_options(
        {"contextWindow": {"extraTokens": 0, "extraSources": "definitions"}, "warm": False})
    assert (config.contextWindow.extraTokens, config.contextWindow.extraSources, config.warm) == (0, "definitions", False)
    assert problems == []
