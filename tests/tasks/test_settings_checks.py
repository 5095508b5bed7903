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
