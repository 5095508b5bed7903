"""One typed config per design (designs.configs): what settings.json records of a design, read back as the same
config; the pooled rules stored in full, so that a folder replays under its own rules whatever versions a later
ut-peft knows."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

from ut_peft.accessibility import GridConfig, SweepConfig, store
from ut_peft.accessibility.designs.configs import (
    AdaptiveConfig,
    FixedConfig,
    PooledConfig,
    SequentialConfig,
    design_config_from_record,
    with_recorded_rules,
)
from ut_peft.accessibility.designs.pooled_rules import POOLED_RULES, PooledRules


def _pooled(**design) -> SweepConfig:
    return SweepConfig(
        model="tiny-llama",
        source="tokens",
        ms=[1, 3, 5],
        grid=GridConfig(start=4, stop=200),
        design=PooledConfig(**design),
    )


@pytest.mark.parametrize(
    "config",
    [
        SweepConfig(grid=GridConfig(lengths=[4, 8])),
        SweepConfig(),
        SweepConfig(design="sequential", target_ci={1: 4.0, 2: 6.0}, budget_row_steps=1000),
        SweepConfig(ms=[1, 3, 5], design="pooled", target_slope_se=0.5, target_n50_se={1: 1.0, 5: 2.0}),
        SweepConfig(ms=[1, 3, 5], design="pooled", target_slope_se=0.5, pooled_version=8),
    ],
)
def test_a_design_config_is_read_back_from_the_settings_it_writes(config):
    settings = json.loads(json.dumps(config.fingerprint({"kind": "tokens"})))
    assert SweepConfig.from_settings(settings).design == config.design


def test_the_shorthand_keywords_are_the_design_config_and_a_new_version_brings_its_own_rules():
    shorthand = SweepConfig(ms=[1, 3], design="pooled", target_slope_se=0.5, pooled_version=7)
    typed = SweepConfig(ms=[1, 3], design=PooledConfig(target_slope_se=0.5, version=7))
    assert shorthand.design == typed.design and typed.design.rules == POOLED_RULES[7]
    moved = dataclasses.replace(typed, pooled_version=8)
    assert moved.design.rules == POOLED_RULES[8] and moved.design.target_slope_se == 0.5
    assert moved.cram.abandon_audit == POOLED_RULES[8].audit  # the audit comes with the rules
    assert isinstance(SweepConfig().design, AdaptiveConfig)
    assert isinstance(SweepConfig(grid=GridConfig(lengths=[4])).design, FixedConfig)
    with pytest.raises(ValueError, match="the adaptive design has no target_slope_se .* belongs to the pooled"):
        SweepConfig(target_slope_se=1.0)
    with pytest.raises(ValueError, match="unknown design 'bisect', available: fixed, adaptive, sequential, pooled"):
        design_config_from_record({"kind": "bisect"}, fixed_lengths=False)


def test_pooled_rules_of_ones_own_are_recorded_in_full_and_read_back_with_no_version_s_coverage():
    own = dataclasses.replace(POOLED_RULES[2], min_rows=32, width_z=1.0)
    config = _pooled(target_slope_se=1.0, version=None, rules=own)
    settings = json.loads(json.dumps(config.fingerprint({"kind": "tokens"})))
    assert settings["design"]["rules"] == own.record() and settings["design"]["version"] is None
    again = SweepConfig.from_settings(settings).design
    assert again.rules == own and again.known_version() is None
    assert _pooled(target_slope_se=1.0, version=7).design.known_version() == 7
    # A version names exactly its rules: other rules under its number (a hand-edited settings.json) are refused.
    with pytest.raises(ValueError, match="not version 7's \\(they differ in min_rows, width_z\\): a version names"):
        PooledConfig(target_slope_se=1.0, version=7, rules=own)
    edited = json.loads(json.dumps(_pooled(target_slope_se=1.0, version=7).fingerprint({"kind": "tokens"})))
    edited["design"]["rules"]["min_rows"] = 8
    with pytest.raises(ValueError, match="not version 7's \\(they differ in min_rows\\)"):
        SweepConfig.from_settings(edited)


def test_a_folder_written_before_the_rules_were_recorded_reads_as_its_version_s_rules(tmp_path):
    config = _pooled(target_slope_se=1.0, version=7)
    config.resolve_autocast(torch.device("cpu"))  # as a sweep records it
    settings = json.loads(json.dumps(config.fingerprint({"kind": "tokens"})))
    old = dict(settings, design={k: v for k, v in settings["design"].items() if k != "rules"})
    (tmp_path / "settings.json").write_text(json.dumps(old))
    assert store.recorded_settings(tmp_path, old) == settings  # so the same sweep resumes it
    assert not store.check_settings(tmp_path, settings, overwrite=False)
    no_version = {k: v for k, v in old["design"].items() if k != "version"}
    assert with_recorded_rules(no_version)["rules"] == POOLED_RULES[1].record()  # before versions: version 1
    retired = dict(no_version, version=10)  # a version this ut-peft does not know, and no rules to run it with
    assert with_recorded_rules(retired) == retired
    with pytest.raises(ValueError, match="version 10 of the pooled design's rules; this ut-peft knows versions"):
        design_config_from_record(retired, fixed_lengths=False)


def test_a_rules_record_round_trips_and_refuses_what_this_ut_peft_cannot_apply():
    for rules in POOLED_RULES.values():
        assert PooledRules.from_record(json.loads(json.dumps(rules.record()))) == rules
    with pytest.raises(ValueError, match="fields this ut-peft does not know \\(bend\\): they were written by a later"):
        PooledRules.from_record(dict(POOLED_RULES[2].record(), bend=True))
    with pytest.raises(ValueError, match="incomplete pooled rules"):
        PooledRules.from_record({"width_z": 1.0})
    with pytest.raises(ValueError, match="the sequential design has no version .* belongs to the pooled design"):
        SweepConfig(design="sequential", target_ci=3.0, pooled_version=2)
    assert SweepConfig(design="sequential", target_ci=3.0).design == SequentialConfig(target_ci=3.0)


def test_a_resume_that_writes_the_rules_in_full_leaves_a_folder_written_before_them_readable(tmp_path):
    """A resume rewrites settings.json with the rules in full; the folder's summary.json (and rows-settings.json)
    written before say the same sweep without them, so neither reads as an edit, while a real edit still does."""
    committed = Path(__file__).resolve().parents[3] / "results" / "smollm2-135m" / "pooled-words-v7"
    folder = tmp_path / "old"
    folder.mkdir()
    for name in ("settings.json", "summary.json"):
        shutil.copy(committed / name, folder / name)
    written = store.read_settings(folder)
    assert "rules" not in written["design"]  # a folder from before the rules were recorded
    again = SweepConfig.from_settings(store.recorded_settings(folder, written), protocol=written["protocol"])
    resumed = json.loads(json.dumps(again.fingerprint(written["source"])))
    assert resumed["design"]["rules"] == POOLED_RULES[7].record()
    store.prepare_folder(folder, resumed, clear=False)  # what a resume writes, then killed before its summary
    store.check_unedited(folder, store.read_settings(folder))
    edited = dict(resumed, design=dict(resumed["design"], target_slope_se=9.0))
    (folder / "settings.json").write_text(json.dumps(edited))
    with pytest.raises(store.SettingsEditedError, match="design.target_slope_se"):
        store.check_unedited(folder, store.read_settings(folder))
