"""Retargeting a sweep (sweep.retarget_sweep, run_sweep(retarget_from=...), --retarget-from): a new folder starts from
the rows of an old one that the new stopping targets replay as their own, then resumes like any folder.

Most tests drive the designs with simulated rows (a known truth, no cramming): the tiny model only gives the
settings their fingerprint. One test crams for real, from the sweep to its retarget to the end."""

import dataclasses
import json
import os
import re

import numpy as np
import pytest

from ut_peft.accessibility import (
    CramConfig,
    GridConfig,
    SweepConfig,
    retarget_sweep,
    run_sweep,
    store,
    summarize_folder,
)
from ut_peft.accessibility.design import POOLED_RULES, make_design
from ut_peft.accessibility.designs.configs import PooledConfig
from ut_peft.accessibility.engine.rows import Row
from ut_peft.accessibility.engine.sources import init_seed
from ut_peft.accessibility.report import retarget_line
from ut_peft.accessibility.sweep import _validated, check_rows, replayed_rows


def _config(design_settings, overrides):
    settings = dict(
        model="tiny-llama",
        source="tokens",
        grid=GridConfig(start=4, stop=100),
        num_sequences=6,
        cram=CramConfig(max_steps=1000, patience=1000),
        support_sequences=8,
        support_seq_len=4,
        **design_settings,
    )
    settings.update(overrides)
    return SweepConfig(**settings)


def pooled(**overrides):
    return _config(dict(ms=[1, 2, 3], design="pooled", target_slope_se=2.0, target_n50_se=3.0), overrides)


def sequential(**overrides):
    return _config(dict(ms=[1, 2], design="sequential", target_ci=12.0), overrides)


def simulated(m, n, index, seed=0):
    """A known truth, n_50 = 12 m + 3 with a logistic spread of texts; steps grow towards a text's threshold."""
    threshold = 12.0 * m + 3.0 + 1.5 * m * np.random.default_rng([7, index]).logistic()
    accessible = bool(n < threshold)
    steps = int(50 + 400 * min(1.0, n / threshold)) if accessible else 900
    return Row(
        m=m,
        n=n,
        index=index,
        init_seed=init_seed(seed, m, n, index),
        tf_accuracy=1.0 if accessible else 0.5,
        greedy_exact=accessible,
        accessible=accessible,
        steps=steps,
        final_loss=0.1,
        best_accuracy=1.0 if accessible else 0.5,
        stop_reason="converged" if accessible else "max_steps",
        seconds=0.0,
        rank=0,
    )


def drive(design, rows=None, stop_after=None):
    """Run a design on simulated rows as run_sweep does; ``stop_after`` rows in, stop as a killed run would."""
    rows = {} if rows is None else dict(rows)
    done = 0
    while jobs := design.next_jobs(rows):
        for job in jobs:
            if stop_after is not None and done == stop_after:
                return rows
            rows[job] = simulated(*job)
            done += 1
    return rows


def fingerprint(config, model):
    config, source = _validated(config, model, None)
    return config, config.fingerprint(source.describe())


def write_sweep(folder, config, model, rows, inflight=()):
    """A sweep folder as run_sweep leaves it: settings.json, rows.jsonl, and in-flight snapshots (any bytes: a
    retarget copies them as they are)."""
    _, settings = fingerprint(config, model)
    store.prepare_folder(folder, settings, clear=False)
    for key in sorted(rows):
        store.append_row(store.rows_file(folder, 0), rows[key])
    for key in inflight:
        path = store.inflight_path(folder, *key)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(f"state of {key}".encode())
    return settings


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_rows_kept_are_the_prefix_the_new_design_replays_and_the_rest_is_dropped(tmp_path, llama):
    old_config, new_config = pooled(), pooled(target_slope_se=1.0, target_n50_se={1: 1.5, 2: 2.0, 3: 2.5})
    old_rows = drive(make_design(old_config))
    write_sweep(tmp_path / "old", old_config, llama, old_rows)
    before = snapshot(tmp_path / "old")
    record = retarget_sweep(tmp_path / "old", tmp_path / "new", new_config, model=llama)
    assert snapshot(tmp_path / "old") == before  # only read

    kept = store.read_rows(tmp_path / "new")
    design = make_design(new_config)
    rounds = design.rounds(old_rows)  # the rounds the new design decides as the old run did, complete in it
    assert rounds and len(rounds) < len(make_design(old_config).rounds(old_rows))
    replayed = {job for jobs in rounds for job in jobs}
    replayed |= {job for job in design.next_jobs({k: old_rows[k] for k in replayed}) if job in old_rows}
    assert set(kept) == replayed == set(replayed_rows(design, old_rows))
    assert all(kept[key] == old_rows[key] for key in kept)  # the rows themselves, unchanged
    assert design.rounds(kept) == rounds  # a prefix: the new design replays every kept round as its own
    assert 0 < len(kept) < len(old_rows)  # the tighter targets place their first fitted round elsewhere
    assert record["rows_kept"] == len(kept) and record["rows_dropped"] == len(old_rows) - len(kept)
    assert record["folder"] == os.path.join("..", "old") and record["design"]["target_slope_se"] == 2.0
    assert store.read_retargeted(tmp_path / "new") == record
    # The new folder's settings are the new run's own (no record in them): a resume with the same settings goes on.
    config, settings = fingerprint(new_config, llama)
    assert store.read_settings(tmp_path / "new") == json.loads(json.dumps(settings))
    assert store.check_settings(tmp_path / "new", settings, overwrite=False) is False
    check_rows(config, settings, kept)  # what resume and the committed-rows test do


def test_a_retargeted_folder_resumes_to_where_a_fresh_run_of_the_new_targets_ends(tmp_path, llama):
    tight = dict(target_slope_se=0.5, target_n50_se=1.0)
    for case, (old_config, new_config, kill) in enumerate(
        [
            (pooled(), pooled(**tight), None),  # tightened: a round decided otherwise, then more rounds
            (pooled(**tight), pooled(), None),  # loosened: the old run's last rounds are dropped
            (pooled(budget_row_steps=20_000), pooled(budget_row_steps=60_000), 7),  # a budget raised, mid-round
            (sequential(), sequential(target_ci=4.0), None),
            (sequential(target_ci=4.0), sequential(target_ci=8.0), 30),  # loosened, from a killed run
        ]
    ):
        old, new = tmp_path / f"old{case}", tmp_path / f"new{case}"
        whole = drive(make_design(old_config))
        old_rows = drive(make_design(old_config), stop_after=len(whole) - kill) if kill else whole
        write_sweep(old, old_config, llama, old_rows)
        record = retarget_sweep(old, new, new_config, model=llama)
        resumed = drive(make_design(new_config), store.read_rows(new))  # a plain resume of the new folder
        fresh = drive(make_design(new_config))
        assert resumed == fresh
        assert 0 < record["rows_kept"] < len(fresh) or record["rows_dropped"] > 0  # not a copy of either run


def test_in_flight_snapshots_of_the_jobs_asked_for_next_are_copied_and_no_others(tmp_path, llama):
    old_config, new_config = pooled(), pooled(target_slope_se=1.0, target_n50_se=2.0)
    whole = drive(make_design(old_config))
    design = make_design(new_config)
    kept_rounds = design.rounds(whole)
    # Killed half-way into the last round both designs decide alike: its other half is in flight.
    done = {job for jobs in kept_rounds[:-1] for job in jobs}
    last = kept_rounds[-1]
    finished, flying = last[: len(last) // 2], last[len(last) // 2 :]
    old_rows = {key: whole[key] for key in done | set(finished)}
    dropped_row = next(key for key in sorted(whole) if key not in done and key not in last)
    elsewhere = (dropped_row[0], dropped_row[1], 10_000)  # a job no design of these rows asks for
    write_sweep(tmp_path / "old", old_config, llama, old_rows, inflight=[*flying, elsewhere])
    record = retarget_sweep(tmp_path / "old", tmp_path / "new", new_config, model=llama)
    assert set(store.read_rows(tmp_path / "new")) == done | set(finished)  # the half-done round's rows stay
    assert sorted(store.inflight_keys(tmp_path / "new")) == sorted(flying)
    for key in flying:
        assert store.inflight_path(tmp_path / "new", *key).read_bytes() == f"state of {key}".encode()
    assert (record["inflight_kept"], record["inflight_dropped"]) == (len(flying), 1)


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(seed=1), "seed"),
        (dict(cram=CramConfig(max_steps=900, patience=1000)), "cram.max_steps"),
        (dict(ms=[1, 2, 4]), "ms"),
        (dict(grid=GridConfig(start=4, stop=120)), "grid.stop"),
        (dict(num_sequences=4), "num_sequences"),
    ],
)
def test_a_setting_other_than_the_stopping_targets_is_refused_naming_it(tmp_path, llama, change, named):
    write_sweep(tmp_path / "old", pooled(), llama, drive(make_design(pooled()), stop_after=12))
    new_config = pooled(target_slope_se=1.0, **change)
    with pytest.raises(ValueError, match=rf"other settings than these \(differ: {named}\); a retarget changes only"):
        retarget_sweep(tmp_path / "old", tmp_path / "new", new_config, model=llama)
    assert not (tmp_path / "new").exists()


def test_a_retarget_that_changes_nothing_or_another_design_is_refused(tmp_path, llama):
    write_sweep(tmp_path / "old", pooled(), llama, drive(make_design(pooled()), stop_after=12))
    with pytest.raises(ValueError, match="run with these very targets: resume it"):
        retarget_sweep(tmp_path / "old", tmp_path / "new", pooled(), model=llama)
    with pytest.raises(ValueError, match=r"differ: design\.kind"):
        retarget_sweep(tmp_path / "old", tmp_path / "new", sequential(ms=[1, 2, 3]), model=llama)
    fixed = SweepConfig(model="tiny-llama", source="tokens", grid=GridConfig(lengths=[2]), support_sequences=8)
    with pytest.raises(ValueError, match="only the sequential and pooled designs have stopping targets"):
        retarget_sweep(tmp_path / "old", tmp_path / "new", fixed, model=llama)


def test_a_new_folder_that_holds_a_sweep_is_refused_and_a_crashed_retarget_is_redone(tmp_path, llama):
    new_config = pooled(target_slope_se=1.0)
    write_sweep(tmp_path / "old", pooled(), llama, drive(make_design(pooled()), stop_after=12))
    write_sweep(tmp_path / "busy", pooled(), llama, {(1, 4, 0): simulated(1, 4, 0)})
    before = snapshot(tmp_path / "busy")
    held = r"busy already holds a sweep \(settings\.json, rows-settings\.json, rows\.jsonl\); a retarget"
    with pytest.raises(ValueError, match=held):
        retarget_sweep(tmp_path / "old", tmp_path / "busy", new_config, model=llama)
    assert snapshot(tmp_path / "busy") == before
    with pytest.raises(ValueError, match="is the folder retargeted from"):
        retarget_sweep(tmp_path / "old", tmp_path / "old", new_config, model=llama)
    # A tracker's folder or a note is no sweep; an empty folder neither.
    (tmp_path / "new" / "runs").mkdir(parents=True)
    (tmp_path / "new" / "runs" / "events").write_text("x")
    record = retarget_sweep(tmp_path / "old", tmp_path / "new", new_config, model=llama)
    assert (tmp_path / "new" / "runs" / "events").read_text() == "x"
    # Retargeting into it again (the same command rerun): refused, saying what to do instead.
    with pytest.raises(ValueError, match="retargeted from .*old earlier: resume it with the same flags, without"):
        retarget_sweep(tmp_path / "old", tmp_path / "new", new_config, model=llama)
    # Killed before settings.json (the last file written): a resume says so, and a second retarget redoes it.
    (tmp_path / "new" / store.SETTINGS_FILE).unlink()
    (tmp_path / "new" / "rows.jsonl").write_text((tmp_path / "new" / "rows.jsonl").read_text()[:50])
    _, settings = fingerprint(new_config, llama)
    with pytest.raises(ValueError, match="holds an unfinished retarget from .*old.*run the retarget again"):
        store.check_settings(tmp_path / "new", settings, overwrite=False)
    assert retarget_sweep(tmp_path / "old", tmp_path / "new", new_config, model=llama) == record
    assert len(store.read_rows(tmp_path / "new")) == record["rows_kept"]


def test_dry_run_writes_nothing_and_a_retargeted_folder_retargets_again_with_its_history(tmp_path, llama):
    write_sweep(tmp_path / "old", pooled(), llama, drive(make_design(pooled())))
    dry = retarget_sweep(tmp_path / "old", tmp_path / "new", pooled(target_slope_se=1.0), model=llama, dry_run=True)
    assert not (tmp_path / "new").exists() and dry["rows_kept"] > 0
    retarget_sweep(tmp_path / "old", tmp_path / "new", pooled(target_slope_se=1.0), model=llama)
    again = retarget_sweep(tmp_path / "new", tmp_path / "newer", pooled(target_slope_se=0.7), model=llama)
    assert again["previous"] == dry and again["folder"] == os.path.join("..", "new")
    assert store.retargeted_source(tmp_path / "newer", again) == tmp_path / "new"
    # The report names the whole history: each folder before, the targets it ran with, what of it was kept.
    line = retarget_line(again)
    assert line.startswith(
        f"Retargeted from {os.path.join('..', 'new')} (relative to this sweep's folder), which ran "
    )
    assert "target_slope_se 1.0: " in line
    old, new = os.path.join("..", "old"), os.path.join("..", "new")
    assert f"; that folder was itself retargeted from {old} (relative to {new}), which ran with " in line
    assert f"{dry['rows_kept']} of its rows kept" in line
    assert line.count("which ran with") == 2


def test_a_real_sweep_retargeted_ends_where_a_fresh_run_ends_and_its_report_says_so(tmp_path, llama):
    from ut_peft.accessibility.report import console_summary

    def config(seed=0, **targets):
        return SweepConfig(
            model="tiny-llama",
            seed=seed,
            source="tokens",
            ms=[1, 2, 3],
            grid=GridConfig(start=2, stop=12),
            design="pooled",
            num_sequences=4,
            cram=CramConfig(max_steps=30, patience=30, batch_size=8),
            support_sequences=8,
            support_seq_len=4,
            **targets,
        )

    loose, tight = dict(target_slope_se=0.5, budget_row_steps=400), dict(target_slope_se=0.4, budget_row_steps=700)
    run_sweep(config(**loose), tmp_path / "old", model=llama, progress=False)
    summary = run_sweep(config(**tight), tmp_path / "new", model=llama, progress=False, retarget_from=tmp_path / "old")
    fresh = run_sweep(config(**tight), tmp_path / "fresh", model=llama, progress=False)

    def decisions(folder):
        return {key: (row["accessible"], row["steps"]) for key, row in store.read_rows(folder).items()}

    assert decisions(tmp_path / "new") == decisions(tmp_path / "fresh")
    assert summary.pooled == fresh.pooled
    record = summary.retargeted_from
    assert record == store.read_retargeted(tmp_path / "new") and record["rows_kept"] > 0
    assert record["rows_kept"] < len(store.read_rows(tmp_path / "fresh"))  # the new folder crammed rows of its own
    line = next(s for s in (tmp_path / "new" / store.REPORT_FILE).read_text().splitlines() if "Retargeted from" in s)
    # The old folder's stopping fields, not its rules record (which the version names).
    assert "which ran with budget_row_steps 400, target_slope_se 0.5: " in line and "logit_offsets" not in line
    assert "Retargeted from" in console_summary(summary)
    assert "Retargeted from" not in (tmp_path / "fresh" / store.REPORT_FILE).read_text()
    # Resumed with the same settings and no retarget: nothing left to do, the same summary; --report-only agrees.
    again = run_sweep(config(**tight), tmp_path / "new", model=llama, progress=False)
    assert again == summary
    reported = summarize_folder(tmp_path / "new", llama, support_sequences=8, support_seq_len=4)
    assert json.loads(json.dumps(reported.to_dict())) == json.loads(json.dumps(summary.to_dict()))
    with pytest.raises(ValueError, match="overwrite"):
        run_sweep(config(**tight), tmp_path / "x", model=llama, overwrite=True, retarget_from=tmp_path / "old")
    with pytest.raises(ValueError, match=r"differ: seed"):
        run_sweep(config(seed=1, **tight), tmp_path / "x", model=llama, retarget_from=tmp_path / "old")
    assert not (tmp_path / "x").exists()  # refused before anything is written or locked


def test_the_command_retargets_from_a_settings_json_with_new_targets_and_refuses_what_cannot_work(tmp_path, capsys):
    from ut_peft.accessibility.testing import crammable_model
    from ut_peft.cli import cram as command

    model_dir = tmp_path / "model"
    crammable_model("llama").save_pretrained(model_dir)
    flags = f"--model {model_dir} --source tokens --ms 1 2 3 --design pooled --start 2 --stop 12 --num-sequences 4"
    flags += " --max-steps 30 --patience 30 --batch-size 8 --support-sequences 8 --snapshot-minutes 0"
    command.main(command.parse([*flags.split(), "--budget", "300", "--output", str(tmp_path / "old")]))
    old_rows = store.read_rows(tmp_path / "old")
    # The documented way: the old folder's settings.json as the config, the new targets on the command line.
    retarget = ["--config", str(tmp_path / "old" / store.SETTINGS_FILE), "--retarget-from", str(tmp_path / "old")]
    command.main(command.parse([*retarget, "--budget", "500", "--output", str(tmp_path / "new")]))
    out = capsys.readouterr().out
    relative = os.path.join("..", "old")
    assert f"Retargeted from {relative} (relative to this sweep's folder)" in out and "rows kept" in out
    new_rows = store.read_rows(tmp_path / "new")
    assert set(old_rows) <= set(new_rows) and len(new_rows) > len(old_rows)  # a raised budget keeps every row
    assert store.read_settings(tmp_path / "new")["design"]["budget_row_steps"] == 500
    for extra, message in [
        (["--overwrite", "--output", str(tmp_path / "other")], "--overwrite would discard"),
        (["--report-only", "--output", str(tmp_path / "other")], "does not go with --report-only"),
        (["--output", str(tmp_path / "new")], "already holds a sweep"),
    ]:
        with pytest.raises(ValueError, match=message):
            command.main(command.parse([*retarget, "--budget", "500", *extra]))
    nowhere = ["--budget", "500", "--retarget-from", str(tmp_path), "--output", str(tmp_path / "y")]
    with pytest.raises(ValueError, match="--retarget-from .* holds no run"):
        command.main(command.parse([*flags.split(), *nowhere]))


def test_a_version_1_pooled_sweep_retargets_to_version_2_keeping_only_the_rows_version_2_replays(tmp_path, llama):
    """The live version-1 folders move to the newer rules as to new targets: the rows the new rules ask for as the
    old run did stay (version 2 decides every round as version 1 did and only stops later, so all of them), and the
    new folder resumes to where a fresh version-2 run ends; with other targets too, only the replayed rows stay."""
    old_config, new_config = pooled(pooled_version=1), pooled(pooled_version=2)
    old_rows = drive(make_design(old_config))
    old_settings = write_sweep(tmp_path / "old", old_config, llama, old_rows)
    assert old_settings["design"]["version"] == 1
    record = retarget_sweep(tmp_path / "old", tmp_path / "new", new_config, model=llama)
    kept = store.read_rows(tmp_path / "new")
    assert kept == old_rows == replayed_rows(make_design(new_config), old_rows)
    assert record["design"]["version"] == 1 and store.read_settings(tmp_path / "new")["design"]["version"] == 2
    config, settings = fingerprint(new_config, llama)
    check_rows(config, settings, kept)
    fresh = drive(make_design(new_config))
    assert drive(make_design(new_config), kept) == fresh and len(fresh) > len(old_rows)  # v2 goes on past v1's stop
    tighter = pooled(pooled_version=2, target_slope_se=1.0, target_n50_se={1: 1.5, 2: 2.0, 3: 2.5})
    record = retarget_sweep(tmp_path / "old", tmp_path / "newer", tighter, model=llama)
    kept = store.read_rows(tmp_path / "newer")
    assert set(kept) == set(replayed_rows(make_design(tighter), old_rows)) and 0 < len(kept) < len(old_rows)
    assert drive(make_design(tighter), kept) == drive(make_design(tighter))
    # Back from settings.json, each folder keeps its own version; a version this ut-peft does not know is refused.
    assert SweepConfig.from_settings(store.read_settings(tmp_path / "old")).design.version == 1
    assert SweepConfig.from_settings(store.read_settings(tmp_path / "new")).design.version == 2
    with pytest.raises(ValueError, match="version 10 of the pooled design's rules; this ut-peft knows versions 1, 2"):
        pooled(pooled_version=10)


def test_a_pooled_sweep_without_an_abandon_retargets_to_audited_rules_keeping_every_row(tmp_path, llama):
    """Audited rules (version 2's with an audit at 1/4, version 8's abandon rule and targets scaled by 1.25: the
    retired version 4's) bring the audit and its rule (cram.abandon_audit, cram.abandon_below) with them: a version-2
    folder that abandoned no row moves to them as to new targets (its rows are full runs, read as unflagged rows; the
    audited rules keep those their own replay asks for, their sandwich-guarded placement parting from version 2's
    after the bracketing rounds) and resumes to where a fresh run of them ends; a folder that ran an abandon rule of
    its own is another sweep."""
    audited = dataclasses.replace(
        POOLED_RULES[2], audit=0.25, abandon_below=POOLED_RULES[8].abandon_below, target_scale=1.25
    )
    own = PooledConfig(version=None, rules=audited)
    old_config, new_config = pooled(pooled_version=2), pooled(design=own)
    old_rows = drive(make_design(old_config))
    write_sweep(tmp_path / "old", old_config, llama, old_rows)
    record = retarget_sweep(tmp_path / "old", tmp_path / "new", new_config, model=llama)
    kept = store.read_rows(tmp_path / "new")
    assert kept == replayed_rows(make_design(new_config), old_rows) and 0 < len(kept) < len(old_rows)
    assert record["rows_kept"] == len(kept) and record["rows_dropped"] == len(old_rows) - len(kept)
    assert drive(make_design(new_config), kept) == drive(make_design(new_config))
    settings = store.read_settings(tmp_path / "new")
    assert settings["design"]["version"] is None and settings["design"]["rules"] == audited.record()
    assert settings["cram"]["abandon_audit"] == 0.25
    assert settings["cram"]["abandon_below"] == [list(pair) for pair in audited.abandon_below]  # the rules' rule
    config, fingerprinted = fingerprint(new_config, llama)
    check_rows(config, fingerprinted, kept)
    ruled = pooled(pooled_version=2, cram=CramConfig(max_steps=1000, patience=1000, abandon_below=((100, 0.2),)))
    write_sweep(tmp_path / "ruled", ruled, llama, old_rows)
    with pytest.raises(ValueError, match="differ: cram.abandon_audit"):
        retarget_sweep(tmp_path / "ruled", tmp_path / "no", pooled(design=own, cram=ruled.cram), model=llama)


def test_a_version_2_pooled_sweep_retargets_to_version_7_keeping_its_rows_and_stopping_at_the_lower_floor(
    tmp_path, llama
):
    """Version 7 is version 2 with a floor of 64 fitted rows instead of 128: at targets loose enough that the floor
    decides the stop it stops sooner, and every round before that is version 2's. So a version-2 folder short of the
    new floor retargets keeping every row and resumes to where a fresh version-7 run ends; one past it keeps the
    rows version 7 asks for."""
    old_config, new_config = pooled(pooled_version=2), pooled(pooled_version=7)
    fresh_v2, fresh_v7 = drive(make_design(old_config)), drive(make_design(new_config))
    assert len(fresh_v7) < len(fresh_v2)  # loose targets: the floor decides the stop
    assert all(fresh_v2[key] == row for key, row in fresh_v7.items())  # version 7's rows are version 2's
    partial = drive(make_design(old_config), stop_after=len(fresh_v7) - 3)  # killed mid-round, before the new stop
    write_sweep(tmp_path / "old", old_config, llama, partial)
    record = retarget_sweep(tmp_path / "old", tmp_path / "new", new_config, model=llama)
    kept = store.read_rows(tmp_path / "new")
    assert kept == partial and record["rows_dropped"] == 0
    assert drive(make_design(new_config), kept) == fresh_v7
    assert store.read_settings(tmp_path / "new")["design"]["version"] == 7
    write_sweep(tmp_path / "done", old_config, llama, fresh_v2)
    record = retarget_sweep(tmp_path / "done", tmp_path / "newer", new_config, model=llama)
    assert store.read_rows(tmp_path / "newer") == fresh_v7
    assert record["rows_dropped"] == len(fresh_v2) - len(fresh_v7)


def _garbage_line(folder):
    path = folder / "rows.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + [b"garbage\n"] + lines[2:]))
    return "rows.jsonl:3 is not valid JSON"


def _conflicting_rows(folder):
    line = json.loads((folder / "rows.jsonl").read_text().splitlines()[0])
    flipped = dict(line, accessible=not line["accessible"], greedy_exact=not line["accessible"])
    (folder / "rows.rank1.jsonl").write_text(json.dumps(flipped) + "\n")
    return "are two rows of .* that disagree"


def _row_of_another_sweep(folder):
    store.append_row(store.rows_file(folder, 0), simulated(9, 4, 0))
    return r"holds row \(m, n, index\) = \(9, 4, 0\), which this folder's settings cannot have produced"


def _unreadable_settings(folder):
    (folder / "settings.json").write_text("{not json")
    return "settings.json is unreadable"


def _unreadable_history(folder):
    (folder / store.RETARGETED_FILE).write_text("{not json")
    return "retargeted.json is unreadable"


def _edited_settings(folder):
    settings = json.loads((folder / "settings.json").read_text())
    (folder / "settings.json").write_text(json.dumps(dict(settings, num_sequences=7)))
    return r"differs from the settings its rows are made under \(changed: num_sequences 6 -> 7"


@pytest.mark.parametrize(
    "damage",
    [
        _garbage_line,
        _conflicting_rows,
        _row_of_another_sweep,
        _unreadable_settings,
        _unreadable_history,
        _edited_settings,
    ],
)
def test_a_damaged_old_folder_is_refused_saying_what_is_wrong_and_that_it_is_left_untouched(tmp_path, llama, damage):
    """The old folder's own errors advise a run of it (resume, or start afresh with overwrite, which would destroy
    the rows a retarget only reads): under a retarget they say what is wrong there and how to mend it in place."""
    old_config, new_config = pooled(), pooled(target_slope_se=1.0)
    write_sweep(tmp_path / "old", old_config, llama, drive(make_design(old_config), stop_after=12))
    wrong = damage(tmp_path / "old")
    if damage is _edited_settings:  # retargeted with its settings.json as it now is (--config OLD/settings.json)
        new_config = pooled(target_slope_se=1.0, num_sequences=7)
    before = snapshot(tmp_path / "old")
    with pytest.raises(ValueError) as refused:
        retarget_sweep(tmp_path / "old", tmp_path / "new", new_config, model=llama)
    message = str(refused.value)
    assert re.search(wrong, message), message
    assert "the folder retargeted from, cannot be read as a sweep" in message and "It is left untouched" in message
    assert "overwrite" not in message and "\n" not in message
    assert snapshot(tmp_path / "old") == before and not (tmp_path / "new").exists()


def test_the_command_refuses_a_damaged_old_folder_in_one_line_without_advising_to_overwrite_it(
    tmp_path, llama, capsys, monkeypatch
):
    from ut_peft.accessibility.testing import crammable_model
    from ut_peft.cli import cram as command
    from ut_peft.cli.common import run

    model_dir = tmp_path / "model"
    crammable_model("llama").save_pretrained(model_dir)
    old_config = pooled(model=str(model_dir), support_seq_len=32)  # what the command measures (it has no flag)
    write_sweep(tmp_path / "old", old_config, llama, drive(make_design(old_config), stop_after=12))
    _garbage_line(tmp_path / "old")
    before = snapshot(tmp_path / "old")
    argv = ["--config", tmp_path / "old" / "settings.json", "--retarget-from", tmp_path / "old"]
    argv += ["--target-slope-se", "1.0", "--output-dir", tmp_path / "new"]
    monkeypatch.delenv("UT_PEFT_DEBUG", raising=False)
    with pytest.raises(SystemExit):
        run(command.main, command.parse, [str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "rows.jsonl:3 is not valid JSON" in err and "It is left untouched" in err and "overwrite" not in err
    assert snapshot(tmp_path / "old") == before
