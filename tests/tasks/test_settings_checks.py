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
