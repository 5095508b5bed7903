"""RunSettings refuses a variant and an hf: family no model can be built with, before the data is generated: a bad
--variant used to pass until the model was built (after the dataset), and --backbone hf:./model (a local folder)
said only "unknown family"."""

import pytest

from ut_peft.tasks.settings import HF_FAMILIES, VARIANTS, RunSettings


def test_the_copies_of_the_variants_and_families_are_the_models():
    from ut_peft.tasks.training import HF_FAMILIES as built
    from ut_peft.universal.configuration import VARIANTS as variants

    assert VARIANTS == variants and HF_FAMILIES == built


def test_an_unknown_variant_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match=r"variant='foo' \(--variant\) is not one of attention_only"):
        RunSettings(variant="foo")


@pytest.mark.parametrize("folder", ["./model", "/abs/model", "~/model", "someone/model"])
def test_a_model_folder_or_hub_id_after_hf_points_to_pretrained(folder):
    with pytest.raises(ValueError, match=f"is pretrained:{folder}$"):
        RunSettings(backbone=f"hf:{folder}")


def test_a_misspelt_family_is_suggested():
    with pytest.raises(ValueError, match=r"did you mean hf:gpt2\?"):
        RunSettings(backbone="hf:gtp2")
    for family in HF_FAMILIES:
        assert RunSettings(backbone=f"hf:{family}").backbone == f"hf:{family}"
    assert RunSettings(backbone="pretrained:./model").backbone == "pretrained:./model"


def test_a_fixed_pool_smaller_than_a_batch_is_refused():
    # Was accepted: each batch was the whole pool (8 rows), while examples_seen counted 16 a step.
    with pytest.raises(ValueError, match=r"train_examples=8 \(the fixed pool\) is smaller than batch_size=16"):
        RunSettings(fresh_data=False, train_examples=8, batch_size=16)
    RunSettings(fresh_data=True, train_examples=8, batch_size=16)  # no pool: train_examples is unused
    RunSettings(fresh_data=False, train_examples=16, batch_size=16)


@pytest.mark.parametrize("backbone", ["hf:gpt2", "hf:llama", "pretrained:smollm2-135m"])
@pytest.mark.parametrize(
    "setting", [{"looped": True}, {"head_dim": 32}, {"variant": "residual_layernorm"}, {"variant": "mlp"}]
)
def test_a_universal_transformer_setting_on_another_backbone_is_refused(backbone, setting):
    """Was wrong: hf: and pretrained: backbones build their own model and ignore looped, head_dim and variant, but the
    results row recorded them (looped: true for a model that is not looped, a head size it does not have). Refused
    now, naming the setting and the backbone; at their defaults (what the command passes when not given) they are
    accepted, and the universal backbones take any value."""
    ((name, value),) = setting.items()
    with pytest.raises(ValueError, match=rf"^{name}={value!r} \(--{name.replace('_', '-')}\) .*backbone={backbone!r}"):
        RunSettings(backbone=backbone, **setting)
    assert RunSettings(backbone=backbone, looped=False, head_dim=16, variant="attention_only").backbone == backbone
    for universal in ("sparse-ut", "random-ut"):
        assert getattr(RunSettings(backbone=universal, **setting), name) == value


@pytest.mark.parametrize("seed", [-1, 1.5, True, "1", None])
def test_a_seed_random_would_draw_as_another_is_refused_at_once(seed):
    """Was wrong: RunSettings(seed=-1) was accepted and the run failed only once the data was built (random.Random
    draws the strings of -n as those of n). Refused at construction now, as the datasets refuse it."""
    with pytest.raises(ValueError, match=r"^seed=.* \(--seed\) must be an integer >= 0"):
        RunSettings(seed=seed)
    assert RunSettings(seed=3).seed == 3


@pytest.mark.parametrize(
    ("backbone", "setting", "flag"),
    [
        ("pretrained:smollm2-135m", {"width": 64}, "--width"),
        ("pretrained:smollm2-135m", {"layers": 3}, "--layers"),
        ("pretrained:smollm2-135m", {"heads": 2}, "--heads"),
        ("pretrained:smollm2-135m", {"positions": False}, "--no-positions"),
        ("pretrained:smollm2-135m", {"backbone_seed": 1}, "--backbone-seed"),
        ("pretrained:smollm2-135m", {"init_std": 1.0}, "--init-std"),
        ("hf:llama", {"positions": False}, "--no-positions"),
        ("hf:gemma3", {"positions": False}, "--no-positions"),
    ],
)
def test_a_setting_the_backbone_never_reads_is_refused(backbone, setting, flag):
    """Was wrong: a pretrained: model is loaded as it was saved, so build_model never reads width, layers, heads,
    positions, backbone_seed or init_std there, and an hf: family other than gpt2 has rotary positions; the results
    row recorded them as the model's. Refused now, naming the setting, its flag and the backbone; at their defaults
    they are accepted, and the backbones that read them take any value."""
    ((name, value),) = setting.items()
    with pytest.raises(ValueError, match=rf"^{name}={value!r} \({flag}\) sets .*backbone={backbone!r} ignores it"):
        RunSettings(backbone=backbone, **setting)
    assert RunSettings(backbone=backbone).backbone == backbone
    readers = ["sparse-ut", "random-ut", "hf:gpt2"] + ([] if name == "positions" else ["hf:llama"])
    for reader in readers:
        assert getattr(RunSettings(backbone=reader, **setting), name) == value


@pytest.mark.parametrize("seed", [-1, 1.5, True, "1", None])
def test_a_backbone_seed_torch_would_draw_as_another_is_refused_at_once(seed):
    """Was wrong: RunSettings(backbone_seed=-1) was accepted and the run failed only once the data was built
    (ut_peft.random_backbone refuses it; torch draws -1 as 2**64 - 1), and True passed as seed 1."""
    with pytest.raises(ValueError, match=r"^backbone_seed=.* \(--backbone-seed\) must be an integer >= 0"):
        RunSettings(backbone_seed=seed)
    assert RunSettings(backbone_seed=3).backbone_seed == 3


def test_applicable_reads_the_settings_a_backbone_ignores_at_their_defaults():
    """A record (or a plan's settings put on another backbone) holding other values where its backbone never reads
    them reads them at the defaults; every other field, and a universal backbone's record, is kept."""
    from ut_peft.tasks.settings import applicable

    recorded = dict(backbone="pretrained:smollm2-135m", width=160, layers=4, heads=4, positions=False,
                    backbone_seed=2, init_std=1.0, variant="mlp", lr=0.5)  # fmt: skip
    assert RunSettings(**applicable(recorded)) == RunSettings(backbone="pretrained:smollm2-135m", lr=0.5)
    assert applicable({**recorded, "backbone": "hf:llama"})["width"] == 160
    assert applicable({**recorded, "backbone": "hf:llama"})["positions"] is True
    assert applicable({**recorded, "backbone": "hf:gpt2"})["positions"] is False
    assert applicable({**recorded, "backbone": "random-ut"}) == {**recorded, "backbone": "random-ut"}
