"""from_pretrained compares the config it was given with the checkpoint's own config.json (seed and weights name the
frozen weights it loads): that file must be read from the same revision as the weights, a missing one means there is
nothing to compare, and a malformed one is an error, not a skipped check. Local folders and a hand-made hub cache
only (the tests run offline)."""

from __future__ import annotations

import shutil

import pytest
import torch
import transformers
from transformers import AutoModelForCausalLM

from ut_peft.universal import UniversalTransformerConfig, UniversalTransformerForCausalLM


def _config(**kwargs):
    shape = dict(vocab_size=7, hidden_size=24, num_hidden_layers=2, num_attention_heads=2, head_dim=3)
    return UniversalTransformerConfig(**{**shape, **kwargs})


def test_a_malformed_config_json_is_an_error_not_a_skipped_check(tmp_path):
    """Was wrong: reading the checkpoint's config.json failed with an OSError, which was read as 'no config.json', so
    from_pretrained(folder, config=...) loaded seed 0's frozen weights under a config naming seed 5."""
    AutoModelForCausalLM.from_config(_config(seed=0)).save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "universal_transformer", "seed": ')
    with pytest.raises(ValueError, match=r"config\.json.*not valid JSON.*seed and weights"):
        UniversalTransformerForCausalLM.from_pretrained(tmp_path, config=_config(seed=5))


def test_a_config_json_that_is_no_config_is_an_error(tmp_path):
    AutoModelForCausalLM.from_config(_config(seed=0)).save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"config\.json.*not a JSON object"):
        UniversalTransformerForCausalLM.from_pretrained(tmp_path, config=_config(seed=5))


def test_a_checkpoint_without_config_json_loads_under_the_given_config(tmp_path):
    """Was wrong: transformers reads a folder without config.json as a config at every default (seed 0), so a
    checkpoint of seed 5 saved without it was refused with config=UniversalTransformerConfig(seed=5)."""
    AutoModelForCausalLM.from_config(_config(seed=5)).save_pretrained(tmp_path)
    (tmp_path / "config.json").unlink()
    model = UniversalTransformerForCausalLM.from_pretrained(tmp_path, config=_config(seed=5))
    assert model.config.seed == 5


def test_the_config_json_read_is_the_one_of_the_revision_the_weights_came_from(tmp_path, monkeypatch):
    """Was wrong: the config.json was read after the weights with the revision the caller named ('main'), resolved
    again, so a branch moved in between compared the loaded weights with another commit's config: a checkpoint of
    seed 0 loaded with seed=0 was refused (or one loaded with seed=7 accepted) because main now pointed at seed 7."""
    repo = tmp_path / "cache" / "models--someone--ut"
    first, second = "1" * 40, "2" * 40
    AutoModelForCausalLM.from_config(_config(seed=0)).save_pretrained(repo / "snapshots" / first)
    AutoModelForCausalLM.from_config(_config(seed=7)).save_pretrained(repo / "snapshots" / second)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(first)

    loading = transformers.PreTrainedModel.from_pretrained.__func__

    def load_then_push(cls, *args, **kwargs):
        model = loading(cls, *args, **kwargs)
        (repo / "refs" / "main").write_text(second)  # someone pushes seed 7's checkpoint to main meanwhile
        return model

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(load_then_push))
    load = dict(cache_dir=tmp_path / "cache", local_files_only=True)
    model = UniversalTransformerForCausalLM.from_pretrained("someone/ut", config=_config(seed=0), **load)
    assert model.config.seed == 0
    (repo / "refs" / "main").write_text(first)
    with pytest.raises(ValueError, match=r"seed=7.*checkpoint.*seed=0"):
        UniversalTransformerForCausalLM.from_pretrained("someone/ut", config=_config(seed=7), **load)


def test_a_location_given_by_keyword_is_checked_too(tmp_path):
    AutoModelForCausalLM.from_config(_config(seed=0)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"seed=5.*checkpoint.*seed=0"):
        UniversalTransformerForCausalLM.from_pretrained(pretrained_model_name_or_path=tmp_path, seed=5)


def test_a_subfolder_s_config_is_the_one_compared(tmp_path):
    AutoModelForCausalLM.from_config(_config(seed=0)).save_pretrained(tmp_path / "inner")
    shutil.copy(tmp_path / "inner" / "config.json", tmp_path / "config.json")
    (tmp_path / "config.json").write_text((tmp_path / "config.json").read_text().replace('"seed": 0', '"seed": 3'))
    assert UniversalTransformerForCausalLM.from_pretrained(tmp_path, subfolder="inner", seed=0).config.seed == 0
    with pytest.raises(ValueError, match=r"seed=3.*checkpoint.*seed=0"):
        UniversalTransformerForCausalLM.from_pretrained(tmp_path, subfolder="inner", config=_config(seed=3))


@pytest.mark.parametrize("override", [dict(num_hidden_layers=3), dict(num_hidden_layers=1), dict(looped=True)])
def test_a_sparse_checkpoint_refuses_another_layout_of_the_same_shapes(tmp_path, override):
    """Was wrong: the sparse construction places its blocks by layers and looped, which change no tensor's shape, so
    from_pretrained(sparse folder, num_hidden_layers=3) loaded the 2-layer construction's layers 0 and 1 beside a third
    drawn for a 3-layer one (transformers only logged the missing keys): a model that is neither construction, under a
    config naming the 3-layer one. Random weights are one draw per layer, whatever the count: loaded as asked."""
    shape = dict(hidden_size=64, num_attention_heads=1)
    AutoModelForCausalLM.from_config(_config(weights="sparse", **shape)).save_pretrained(tmp_path / "sparse")
    name, value = next(iter(override.items()))
    with pytest.raises(ValueError, match=rf"{name}={value!r}.*checkpoint.*{name}="):
        UniversalTransformerForCausalLM.from_pretrained(tmp_path / "sparse", **override)
    AutoModelForCausalLM.from_config(_config(weights="random", **shape)).save_pretrained(tmp_path / "random")
    loaded = UniversalTransformerForCausalLM.from_pretrained(tmp_path / "random", **override)
    rebuilt = AutoModelForCausalLM.from_config(loaded.config)
    assert all(torch.equal(rebuilt.get_parameter(name), p) for name, p in loaded.fixed_parameters().items())
