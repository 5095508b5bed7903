"""The published protocol sets six CramConfig fields itself (engine.protocol.cram_settings): given_tokens, init_std,
lr_scale, check_greedy, gpu_autocast and prefix_ids. A value given from Python that is neither the field's default
(which cannot be told from "not given") nor the published value was replaced without a word; now it is refused,
naming the field, the value given, the published value and what to do."""

import dataclasses

import pytest

from ut_peft.accessibility import CramConfig, SweepConfig, run_sweep
from ut_peft.accessibility.engine.protocol import PUBLISHED_CRAM, cram_settings
from ut_peft.accessibility.testing import crammable_model, small_sweep_config

REFUSED = {"given_tokens": 2, "prefix_ids": (5,), "gpu_autocast": "none"}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_cram_setting_the_published_protocol_would_replace_is_refused(name):
    value, published = REFUSED[name], PUBLISHED_CRAM[name]
    with pytest.raises(ValueError, match=rf"cram\.{name}") as raised:
        SweepConfig(protocol="published", cram=CramConfig(**{name: value}))
    message = str(raised.value)
    assert repr(value) in message and repr(published) in message, message
    assert "drop it" in message and "protocol='ut-peft'" in message, message
    # The same refusal from cram_settings itself, which every published sweep applies (SweepConfig.resolve_prefix).
    with pytest.raises(ValueError, match=rf"cram\.{name} = {repr(value)}".replace("(", r"\(").replace(")", r"\)")):
        cram_settings("published", CramConfig(**{name: value}))
    # The ut-peft protocol takes it as given.
    assert getattr(SweepConfig(protocol="ut-peft", cram=CramConfig(**{name: value})).cram, name) == value


def test_every_refused_setting_is_named_in_one_message():
    with pytest.raises(ValueError) as raised:
        SweepConfig(protocol="published", cram=CramConfig(given_tokens=3, prefix_ids=(2, 7), gpu_autocast="bf16"))
    message = str(raised.value)
    assert "cram.given_tokens = 3" in message and "cram.prefix_ids = (2, 7)" in message, message
    # gpu_autocast "bf16" is CramConfig's default: it cannot be told from "not given", so it is not named.
    assert "gpu_autocast" not in message, message


def test_the_defaults_and_the_published_values_are_taken():
    """CramConfig's defaults (ut-peft's) are what "not given" looks like, and the published values say what the
    protocol sets anyway: both resolve to the published settings."""
    for cram in (CramConfig(), CramConfig(**PUBLISHED_CRAM)):
        config = SweepConfig(protocol="published", cram=cram)
        config.resolve_prefix(None)
        assert {name: getattr(config.cram, name) for name in PUBLISHED_CRAM} == PUBLISHED_CRAM
    # What the published protocol replaces is exactly what cram_settings sets.
    published = cram_settings("published", CramConfig())
    assert {
        f.name for f in dataclasses.fields(CramConfig) if getattr(published, f.name) != getattr(CramConfig(), f.name)
    } <= set(PUBLISHED_CRAM)


def test_run_sweep_refuses_a_cram_setting_given_after_the_config_was_made(tmp_path):
    """A config's cram replaced after construction reaches run_sweep unchecked by SweepConfig: cram_settings refuses it
    there, before the folder is written."""
    config = small_sweep_config(protocol="published", source="tokens")
    config.cram = dataclasses.replace(config.cram, prefix_ids=(5,))
    folder = tmp_path / "run"
    with pytest.raises(ValueError, match=r"cram\.prefix_ids = \(5,\)"):
        run_sweep(config, folder, model=crammable_model("llama"), progress=False)
    assert not folder.exists()
