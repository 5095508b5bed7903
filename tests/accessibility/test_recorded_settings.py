"""settings.json records every setting that moves a number of summary.json (the support sequences the bounds are
measured on too), a folder written before they were recorded keeps meaning what it meant (its summary.json holds
them), neither a resume nor a report rewrites a summary from other support sequences, and a report reads back every
recorded setting its numbers depend on (the step cap of a pooled design). A folder with rows but no summary.json (a
killed run) is checked against the settings its run started under (rows-settings.json) like any other."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ut_peft.accessibility import (
    CramConfig,
    GridConfig,
    SweepConfig,
    merge_sweeps,
    run_sweep,
    store,
    summaries,
    summarize_folder,
)
from ut_peft.accessibility.designs import make_design
from ut_peft.accessibility.engine.rows import Row
from ut_peft.accessibility.engine.sources import init_seed
from ut_peft.accessibility.stats.bounds import support_context
from ut_peft.accessibility.sweep import _validated
from ut_peft.accessibility.testing import small_sweep_config

RESULTS = Path(__file__).resolve().parents[2] / "results"


small_config = small_sweep_config


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished sweep measured on 8 support sequences of 4 tokens (the defaults are 256 of 32)."""
    from ut_peft.accessibility.testing import crammable_model

    folder = tmp_path_factory.mktemp("finished") / "sweep"
    run_sweep(small_config(), folder, model=crammable_model("llama"), progress=False, report=False)
    return folder


def copy(folder, to):
    shutil.copytree(folder, to)
    return to


def as_written_before(folder):
    """``folder`` as a version that did not record the support sequences wrote it: settings.json and the summary's
    settings without them, and no rows-settings.json (the store did not keep one either)."""
    settings = json.loads((folder / "settings.json").read_text())
    for name in store.LATER_SETTINGS:
        settings.pop(name, None)
    (folder / "settings.json").write_text(json.dumps(settings, sort_keys=True))
    summary = json.loads((folder / "summary.json").read_text())
    summary["settings"] = settings
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / store.ROWS_SETTINGS_FILE).unlink(missing_ok=True)


def test_settings_json_records_the_support_sequences_and_leaves_the_old_defaults_out(finished):
    settings = json.loads((finished / "settings.json").read_text())
    assert (settings["support_sequences"], settings["support_seq_len"]) == (8, 4)
    summary = summaries.read_summary(finished)
    assert (summary.support["num_samples"], summary.support["seq_len"]) == (8, 4) and summary.settings == settings
    # At the values every earlier folder was measured with, nothing is added: those folders still resume.
    default = small_config(support_sequences=256, support_seq_len=32).fingerprint({"kind": "tokens"})
    assert not set(store.LATER_SETTINGS) & set(default)
    assert small_config().fingerprint({"kind": "tokens"})["support_sequences"] == 8
    assert SweepConfig.from_settings(settings).support_sequences == 8  # read back, not the default


def test_a_resume_with_other_support_sequences_is_refused_naming_both_values(finished, tmp_path, llama):
    folder = copy(finished, tmp_path / "sweep")
    before = (folder / "summary.json").read_bytes()
    with pytest.raises(ValueError, match=r"changed: support_sequences 8 -> 256\): resume it with its own "):
        run_sweep(small_config(support_sequences=256), folder, model=llama, progress=False, report=False)
    with pytest.raises(ValueError, match=r"changed: support_seq_len 4 -> 32\)"):
        run_sweep(small_config(support_seq_len=32), folder, model=llama, progress=False, report=False)
    with pytest.raises(ValueError, match="records support_sequences = 8, .* and 256 was asked for"):
        summarize_folder(folder, llama, support_sequences=256, report=False)
    assert (folder / "summary.json").read_bytes() == before  # nothing rewritten
    # Left out, the folder's own values are kept: the same summary, byte for byte.
    summarize_folder(folder, llama, report=False)
    assert (folder / "summary.json").read_bytes() == before
    run_sweep(small_config(), folder, model=llama, progress=False, report=False)  # the same settings resume
    assert (folder / "summary.json").read_bytes() == before


def test_a_folder_written_before_the_support_was_recorded_keeps_its_meaning(finished, tmp_path, llama):
    folder = copy(finished, tmp_path / "sweep")
    as_written_before(folder)
    before = json.loads((folder / "summary.json").read_text())
    written = store.read_settings(folder)
    assert store.recorded_settings(folder, written, support_context(llama)) == dict(
        written, support_sequences=8, support_seq_len=4
    )
    # Reported on exactly as it was (before: 256 sequences of 32 tokens, other bounds under the same settings).
    summarize_folder(folder, llama, report=False)
    assert json.loads((folder / "summary.json").read_text()) == before
    # A resume under the old defaults would have rewritten its bounds: refused, naming both values.
    with pytest.raises(ValueError, match=r"changed: support_seq_len 4 -> 32, support_sequences 8 -> 256\)"):
        run_sweep(small_config(support_sequences=256, support_seq_len=32), folder, model=llama, progress=False)
    assert json.loads((folder / "summary.json").read_text()) == before
    # Under its own values it resumes, and settings.json now records them; the numbers are the same.
    summary = run_sweep(small_config(), folder, model=llama, progress=False, report=False)
    assert store.read_settings(folder)["support_sequences"] == 8 and summary.settings == store.read_settings(folder)
    assert json.loads((folder / "summary.json").read_text()) == dict(before, settings=store.read_settings(folder))


def test_an_earlier_summary_s_support_length_is_read_back_unless_it_is_the_default_cut_at_the_context(
    finished, tmp_path, llama
):
    folder = copy(finished, tmp_path / "sweep")
    as_written_before(folder)
    written = store.read_settings(folder)
    # 4 tokens: a length given from Python, or 32 cut at a context of 4; only the model's context tells them apart.
    assert store.recorded_settings(folder, written, context=64)["support_seq_len"] == 4
    assert "support_seq_len" not in store.recorded_settings(folder, written, context=4)
    assert "support_seq_len" not in store.recorded_settings(folder, written)  # no context: not guessed
    summary = json.loads((folder / "summary.json").read_text())
    summary["support"]["seq_len"] = 40  # above the default: no cut makes it, so it is read back without the model
    (folder / "summary.json").write_text(json.dumps(summary))
    assert store.recorded_settings(folder, written)["support_seq_len"] == 40
    with pytest.raises(ValueError, match="records support_seq_len = 40, .* and 4 was asked for"):
        summarize_folder(folder, llama, support_seq_len=4, report=False)
    # A summary written under other settings than settings.json holds (an edit) lends nothing: the edit is refused.
    summary["settings"] = dict(written, seed=1)
    (folder / "summary.json").write_text(json.dumps(summary))
    assert store.recorded_settings(folder, written) == written


def test_the_committed_folders_read_back_the_support_their_summaries_were_measured_on():
    """Every finished folder under results/ resumes and reports on the support sequences its summary records (most
    were measured on 64, which their settings.json, written before, does not say)."""
    checked = 0
    for settings_file in sorted(RESULTS.glob("*/*/settings.json")):
        folder = settings_file.parent
        summary_file = folder / "summary.json"
        if not summary_file.is_file():
            continue
        support = json.loads(summary_file.read_text())["support"]
        recorded = store.recorded_settings(folder, store.read_settings(folder))
        config = SweepConfig.from_settings(recorded)
        assert (config.support_sequences, config.support_seq_len) == (support["num_samples"], support["seq_len"])
        assert store.check_settings(folder, recorded, overwrite=False) is False  # the same settings: a resume
        checked += 1
    assert checked >= 15


def simulated_row(m, n, index):
    """A known truth (n_50 = 12 m + 3, a logistic spread of texts; steps grow towards a text's threshold)."""
    threshold = 12.0 * m + 3.0 + 1.5 * m * np.random.default_rng([7, index]).logistic()
    accessible = bool(n < threshold)
    return Row(
        m=m,
        n=n,
        index=index,
        init_seed=init_seed(0, m, n, index),
        tf_accuracy=1.0 if accessible else 0.5,
        greedy_exact=accessible,
        accessible=accessible,
        steps=int(50 + 400 * min(1.0, n / threshold)) if accessible else 900,
        final_loss=0.1,
        best_accuracy=1.0 if accessible else 0.5,
        stop_reason="converged" if accessible else "max_steps",
        seconds=0.0,
        rank=0,
    )


def test_a_pooled_folder_is_reported_under_its_own_step_cap(tmp_path, llama):
    """The pooled design's steps law is truncated at cram.max_steps (steps_truncated: version 8, and here rules of
    one's own with the step counts and no audit, the retired version 3's): read back at the default cap (3000), a
    report replayed other rounds than the run and refused the folder's own rows."""
    import dataclasses

    from ut_peft.accessibility.designs.configs import PooledConfig
    from ut_peft.accessibility.designs.pooled_rules import POOLED_RULES

    steps = dataclasses.replace(
        POOLED_RULES[2], min_rows=72, steps=True, steps_robust=True, steps_stop_z=1.0, steps_truncated=True
    )
    config = small_config(
        ms=[1, 2, 3],
        grid=GridConfig(start=4, stop=100),
        num_sequences=6,
        cram=CramConfig(max_steps=1000, patience=1000),
        design=PooledConfig(target_slope_se=2.0, target_n50_se=3.0, version=None, rules=steps),
    )
    design, rows = make_design(config), {}
    while jobs := design.next_jobs(rows):
        rows.update((job, simulated_row(*job)) for job in jobs)
    resolved, source = _validated(config, llama, None)
    store.prepare_folder(tmp_path, resolved.fingerprint(source.describe()), clear=False)
    for key in sorted(rows):
        store.append_row(store.rows_file(tmp_path, 0), rows[key])
    read_back = SweepConfig.from_settings(store.read_settings(tmp_path))
    assert read_back.cram.max_steps == 1000 and read_back.design.rules == steps
    pooled = summarize_folder(tmp_path, llama, report=False).pooled
    assert pooled["slope"] == pytest.approx(make_design(config).summary_fit(rows)["slope"], rel=1e-6)


@pytest.mark.parametrize("version", [3, 4, 5, 6])
def test_a_folder_of_a_retired_pooled_version_reads_back_only_with_its_rules_in_full(version):
    """Versions 3 to 6 are retired from the package (no committed folder ran them). A settings.json that names one
    without its rules (as written before settings held the rules) is refused, naming the versions this ut-peft knows;
    one that holds the rules in full (as every sweep records them now; these are the records of
    benchmarks/retired_pooled_rules.json) builds its design under exactly those rules."""

    from ut_peft.accessibility.designs import PooledDesign
    from ut_peft.accessibility.designs.pooled_rules import PooledRules
    from ut_peft.accessibility.testing import pooled_sweep_settings

    retired = json.loads((RESULTS.parent / "benchmarks" / "retired_pooled_rules.json").read_text())
    settings = pooled_sweep_settings(version=version)
    known = f"version {version} of the pooled design's rules; this ut-peft knows versions 1, 2, 7, 8, 9:"
    with pytest.raises(ValueError, match=known):
        SweepConfig.from_settings(settings)
    record = retired[str(version)]["rules"]
    in_full = dict(settings, design=dict(settings["design"], rules=record))
    config = SweepConfig.from_settings(json.loads(json.dumps(in_full)))
    rules = PooledRules.from_record(record)
    assert config.design.version == version and config.design.rules == rules
    assert config.design.known_version() is None  # nothing measured of a version applies to it any more
    assert config.cram.abandon_audit == (rules.audit or 0.0) and config.cram.abandon_below == rules.abandon_below
    design = make_design(config)
    assert isinstance(design, PooledDesign) and design.rules == rules and design.max_steps == 3000
    recorded = json.loads(json.dumps(config.fingerprint(settings["source"])["design"]))
    assert recorded["rules"] == record and recorded["version"] == version  # a resume records the same


def killed(folder, to):
    """A copy of ``folder`` as a run killed before its end leaves it: rows, settings, no summary.json."""
    copy(folder, to)
    for name in ("summary.json", "report.md", "accessibility.png", "n50_vs_m.png"):
        (to / name).unlink(missing_ok=True)
    return to


def edit_settings(folder, **changes):
    path = folder / "settings.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), **changes), sort_keys=True))


@pytest.mark.parametrize(
    "changes, named",
    [
        (dict(num_sequences=4), "num_sequences 2 -> 4"),  # every group looks unfinished: a degenerate fit, rc 0
        (dict(seed=1), "seed 0 -> 1"),
        (dict(support_sequences=256), "support_sequences 8 -> 256"),
    ],
)
def test_an_edited_settings_json_without_a_summary_is_refused_naming_the_change(
    finished, tmp_path, llama, changes, named
):
    folder = killed(finished, tmp_path / "killed")
    assert json.loads((folder / store.ROWS_SETTINGS_FILE).read_text()) == store.read_settings(folder)
    edit_settings(folder, **changes)
    rows = (folder / "rows.jsonl").read_bytes()
    refused = f"changed: {named}; rows-settings.json keeps those.*Restore settings.json from .*rows-settings.json"
    with pytest.raises(store.SettingsEditedError, match=refused):
        summarize_folder(folder, llama, report=False)
    # A resume under the edited settings (the flags settings.json now gives) is refused alike, before anything is
    # written; under the settings the rows were made under, the resume names the setting that differs.
    with pytest.raises(store.SettingsEditedError, match=refused):
        run_sweep(small_config(**changes), folder, model=llama, progress=False, report=False)
    with pytest.raises(ValueError, match=f"changed: {named.split()[0]} "):
        run_sweep(small_config(), folder, model=llama, progress=False, report=False)
    assert (folder / "rows.jsonl").read_bytes() == rows and not (folder / "summary.json").exists()
    # Restored, the folder resumes to the finished run's summary.
    (folder / "settings.json").write_bytes((folder / store.ROWS_SETTINGS_FILE).read_bytes())
    run_sweep(small_config(), folder, model=llama, progress=False, report=False)
    assert summaries.read_summary(folder).to_dict() == summaries.read_summary(finished).to_dict()


def test_a_killed_folder_written_before_rows_settings_json_keeps_the_checks_it_had(finished, tmp_path, llama):
    """A folder from before the store kept rows-settings.json (every committed one) reads and resumes as before."""
    folder = killed(finished, tmp_path / "killed")
    (folder / store.ROWS_SETTINGS_FILE).unlink()
    store.check_unedited(folder, store.read_settings(folder))
    run_sweep(small_config(), folder, model=llama, progress=False, report=False)
    assert (folder / store.ROWS_SETTINGS_FILE).is_file()  # the resume writes it
    assert summaries.read_summary(folder).to_dict() == summaries.read_summary(finished).to_dict()


def test_a_file_source_folder_from_before_its_digest_was_recorded_resumes_and_merges_as_it_did(tmp_path, llama):
    """A words:PATH folder written before settings.json recorded the file's sha256: its settings.json, its in-flight
    snapshots' digest and its merges stay as they were (what the file held then is unknown, so nothing is checked)."""
    from unittest import mock

    from ut_peft.accessibility import merge_sweeps
    from ut_peft.accessibility.engine.sources import WordsSource

    from .test_sweep import _NoBosWordTokenizer, killed_file_sweep

    words = tmp_path / "words.txt"
    words.write_text("\n".join(f"alpha{i}" for i in range(50)))
    config = small_config(source=f"words:{words}", ms=[1], grid=GridConfig(lengths=[4, 6]), num_sequences=2)
    describe = WordsSource.describe

    def as_before(source):  # the description as versions before the digest wrote it
        return {k: v for k, v in describe(source).items() if k != "sha256"}

    with mock.patch.object(WordsSource, "describe", as_before):
        killed_file_sweep(config, tmp_path / "old", llama)
    before = (tmp_path / "old" / "settings.json").read_bytes()
    assert "sha256" not in json.loads(before)["source"] and store.inflight_keys(tmp_path / "old")
    run_sweep(config, tmp_path / "old", model=llama, tokenizer=_NoBosWordTokenizer(), progress=False, report=False)
    rows = store.read_rows(tmp_path / "old")
    assert len(rows) == 4 and any(row.resumed_at for row in rows.values())  # its snapshots were continued
    assert (tmp_path / "old" / "settings.json").read_bytes() == before  # recorded as it was
    assert summarize_folder(tmp_path / "old", llama, report=False).settings == json.loads(before)
    # A folder of this version records the digest, and merges with the old one (which holds none to compare).
    other = small_config(source=f"words:{words}", ms=[2], grid=GridConfig(lengths=[4, 6]), num_sequences=2)
    run_sweep(other, tmp_path / "new", model=llama, tokenizer=_NoBosWordTokenizer(), progress=False, report=False)
    assert "sha256" in store.read_settings(tmp_path / "new")["source"]
    merge_sweeps([tmp_path / "old", tmp_path / "new"], tmp_path / "merged")
    assert "sha256" not in store.read_settings(tmp_path / "merged")["source"]


def test_a_published_words_folder_from_before_the_published_construction_resumes_drawing_as_it_did(tmp_path, llama):
    """A published-protocol words:PATH folder written before that protocol drew every list 5 n words at once: its
    description records no words_per_token, so its words were drawn n at a time (after the BOS, for the n - 1 tokens
    that follow it). The command that started it resumes it so (its settings.json, in-flight snapshots and report as
    they were), and what rebuilds it draws so; a new folder of the same command draws the published construction."""
    import dataclasses
    import functools
    from unittest import mock

    from ut_peft.accessibility import sweep
    from ut_peft.accessibility.config import folder_config
    from ut_peft.accessibility.engine.sources import sequence_rng
    from ut_peft.accessibility.testing import killed_sweep

    from .test_sweep import _NoBosWordTokenizer

    class BosWordTokenizer(_NoBosWordTokenizer):
        """One token per word, and a BOS (id 0) before a text with special tokens, as Gemma's tokenizer."""

        bos_token_id = 0

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [0] * add_special_tokens + super().__call__(text)["input_ids"]}

    tokenizer = BosWordTokenizer()
    words = [f"alpha{i}" for i in range(50)]
    path = tmp_path / "words.txt"
    path.write_text("\n".join(words))
    config = small_config(
        source=f"words:{path}", protocol="published", ms=[1], grid=GridConfig(lengths=[4, 6]), num_sequences=2
    )
    # Written as versions before wrote it: their published protocol drew a file's words n at a time.
    with mock.patch.object(sweep, "run_sweep", functools.partial(sweep.run_sweep, tokenizer=tokenizer)):
        killed_sweep(dataclasses.replace(config, words_per_token=None), tmp_path / "old", llama, 3)
    before = (tmp_path / "old" / "settings.json").read_bytes()
    assert json.loads(before)["source"] == {
        "kind": "words",
        "name": str(path),
        "num_words": 50,
        "sha256": json.loads(before)["source"]["sha256"],
        "special_prefix_ids": [0],
    }
    assert store.inflight_keys(tmp_path / "old")
    run_sweep(config, tmp_path / "old", model=llama, tokenizer=tokenizer, progress=False, report=False)
    rows = store.read_rows(tmp_path / "old")
    assert len(rows) == 4 and any(row.resumed_at for row in rows.values())  # its snapshots were continued
    assert (tmp_path / "old" / "settings.json").read_bytes() == before  # recorded as it was
    assert summarize_folder(tmp_path / "old", llama, report=False).settings == json.loads(before)

    assert folder_config(tmp_path / "old").words_per_token is None
    _, _, _, source = sweep.rebuild_folder(tmp_path / "old", llama, tokenizer)
    for _, n, index in rows:
        drawn = [words[i] for i in sequence_rng(config.seed, n - 1, index).integers(0, len(words), n - 1)]
        older = [0, *tokenizer(" ".join(drawn))["input_ids"]]
        published = [words[i] for i in sequence_rng(config.seed, n, index).integers(0, len(words), 5 * n)]
        assert source.sequence(n, index, config.seed) == older
        assert older != tokenizer(" ".join(published), add_special_tokens=True)["input_ids"][:n]

    # The same command into a new folder draws the published construction; a resume of the old folder told that
    # construction explicitly is refused, naming it.
    run_sweep(config, tmp_path / "new", model=llama, tokenizer=tokenizer, progress=False, report=False)
    assert store.read_settings(tmp_path / "new")["source"]["words_per_token"] == 5
    with pytest.raises(ValueError, match=r"changed: source\.words_per_token null -> 5.*--words-per-token none"):
        explicit = dataclasses.replace(config, words_per_token=5)
        run_sweep(explicit, tmp_path / "old", model=llama, tokenizer=tokenizer, progress=False, report=False)


def test_the_committed_published_words_folders_rebuild_drawing_their_words_n_at_a_time():
    """Every committed folder whose words source records no words_per_token (those of the published protocol drew
    wordfreq's list before that protocol drew every list 5 n words at once) rebuilds, and resumes under the flags
    that started it, drawing its words n at a time, as its rows were crammed."""
    from ut_peft.accessibility.config import SweepConfig, folder_config, rebuilt_config

    checked = 0
    for path in sorted(RESULTS.rglob("settings.json")):
        settings = json.loads(path.read_text())
        source = settings.get("source")
        if not isinstance(source, dict) or source.get("kind") != "words" or "merged_from" in settings:
            continue
        recorded = source.get("words_per_token")
        assert rebuilt_config(settings).words_construction() == recorded, path
        started = SweepConfig(source=folder_config(path.parent).source, protocol=settings.get("protocol", "ut-peft"))
        assert started.as_resumed_in(path.parent).words_construction() == recorded, path
        checked += recorded is None and settings.get("protocol") == "published"
    assert checked >= 4  # smollm2-135m's pooled-words* and published-words-m*, gemma-3-270m's published-words-m*


def test_a_resume_under_another_source_is_not_told_to_give_a_words_construction(tmp_path, llama):
    """A folder refused because the command names another source (random tokens against its words, words against
    its tokens) is not told to resume with --words-per-token: that flag gives back how the folder's words were
    drawn, and no construction makes another source the folder's."""
    import dataclasses

    from .test_sweep import _NoBosWordTokenizer

    path = tmp_path / "words.txt"
    path.write_text("\n".join(f"alpha{i}" for i in range(50)))
    words = small_config(
        source=f"words:{path}", protocol="published", ms=[1], grid=GridConfig(lengths=[4]), num_sequences=1
    )
    tokens = dataclasses.replace(words, source="tokens")
    run_sweep(words, tmp_path / "words", model=llama, tokenizer=_NoBosWordTokenizer(), progress=False, report=False)
    run_sweep(tokens, tmp_path / "tokens", model=llama, progress=False, report=False)
    assert store.read_settings(tmp_path / "words")["source"]["words_per_token"] == 5
    for config, folder, tokenizer in [(tokens, "words", None), (words, "tokens", _NoBosWordTokenizer())]:
        with pytest.raises(ValueError, match=r"changed: .*source\.kind") as refused:
            run_sweep(config, tmp_path / folder, model=llama, tokenizer=tokenizer, progress=False, report=False)
        assert "words-per-token" not in str(refused.value), folder


def test_a_ut_peft_words_folder_refused_for_its_construction_is_not_told_it_is_an_old_published_one(tmp_path, llama):
    """The ut-peft protocol draws a file's words n at a time today, so its folders record no words_per_token: a resume
    under another construction is told to give --words-per-token none, without the published protocol's history
    (why a published folder records none), which is not this folder's."""
    import dataclasses

    from .test_sweep import _NoBosWordTokenizer

    path = tmp_path / "words.txt"
    path.write_text("\n".join(f"alpha{i}" for i in range(50)))
    config = small_config(source=f"words:{path}", ms=[1], grid=GridConfig(lengths=[3]), num_sequences=1)
    run_sweep(config, tmp_path / "ours", model=llama, tokenizer=_NoBosWordTokenizer(), progress=False, report=False)
    with pytest.raises(ValueError, match=r"source\.words_per_token null -> 5.*--words-per-token none") as refused:
        explicit = dataclasses.replace(config, words_per_token=5)
        run_sweep(explicit, tmp_path / "ours", model=llama, tokenizer=_NoBosWordTokenizer(), progress=False)
    assert "published" not in str(refused.value)


def _old_merge_folder(folder, model: Path, ms, summary_seq_len: int | None, recorded_seq_len: int | None = None):
    """A sweep folder of ``model`` (testing.write_sweep_folder) at ``ms``, lengths 2 and 3. ``summary_seq_len``: as a
    version that did not record the support sequences left it, its settings.json without them and its summary.json
    holding the support length they were measured at; None: as this version writes it, ``recorded_seq_len`` in
    settings.json where given (its summary holds no support to read back)."""
    from ut_peft.accessibility.testing import write_sweep_folder

    settings = small_config(str(model), ms=list(ms), grid=GridConfig(lengths=[2, 3])).fingerprint({"kind": "tokens"})
    for name in store.LATER_SETTINGS:
        settings.pop(name)
    if recorded_seq_len is not None:
        settings["support_seq_len"] = recorded_seq_len
    rows = [(m, n, index, True, 5) for m in ms for n in (2, 3) for index in range(2)]
    write_sweep_folder(folder, json.loads(json.dumps(settings)), rows)
    if summary_seq_len is not None:
        support = {"num_samples": 256, "seq_len": summary_seq_len}
        (folder / "summary.json").write_text(json.dumps({"settings": store.read_settings(folder), "support": support}))
    return folder


@pytest.fixture
def model_folder(tmp_path):
    """A local model's folder as merge reads it: its config, whose context (128 positions) cuts no support length."""
    from ut_peft.testing import tiny_config

    tiny_config("llama", max_positions=128).save_pretrained(tmp_path / "model")
    return tmp_path / "model"


def test_old_folders_measured_on_other_support_lengths_are_not_merged(model_folder, tmp_path):
    # Both settings.json predate the support's record: one summary measured 4-token support sequences (asked for:
    # the model's 128 positions cut nothing), the other the default 32. Read without the model's context, the 4 was
    # taken for a cut default and the two merged as one design; a resume and a report (which have the model) read 4.
    folders = [
        _old_merge_folder(tmp_path / "asked", model_folder, [1], summary_seq_len=4),
        _old_merge_folder(tmp_path / "default", model_folder, [2], summary_seq_len=32),
    ]
    with pytest.raises(ValueError, match=r"other settings than .*asked \(differ: support_seq_len 4 -> 32\)"):
        merge_sweeps(folders, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_an_old_folder_merges_with_a_new_one_recording_the_support_it_was_measured_on(model_folder, tmp_path):
    # The same support (4 tokens), spelled two ways: the old folder's summary.json, the new one's settings.json. The
    # merge refused them as differing (support_seq_len 32 -> 4); it records what both were measured on.
    old = _old_merge_folder(tmp_path / "old", model_folder, [1], summary_seq_len=4)
    new = _old_merge_folder(tmp_path / "new", model_folder, [2], summary_seq_len=None, recorded_seq_len=4)
    merge_sweeps([old, new], tmp_path / "merged")
    assert store.read_settings(tmp_path / "merged")["support_seq_len"] == 4
    assert len(store.read_rows(tmp_path / "merged")) == 8


def test_an_old_folder_s_support_length_the_model_cannot_tell_refuses_the_merge_saying_what_to_do(
    model_folder, tmp_path
):
    # 4 tokens: asked for, or the default cut at the model's context; the merge reads the context from the model's
    # config, and where that does not load it says so rather than guessing.
    old = _old_merge_folder(tmp_path / "old", model_folder, [1], summary_seq_len=4)
    new = _old_merge_folder(tmp_path / "new", model_folder, [2], summary_seq_len=None, recorded_seq_len=4)
    shutil.rmtree(model_folder)
    with pytest.raises(ValueError, match=r"old: .*support .*4 tokens.*config.* does not load.*merge again"):
        merge_sweeps([old, new], tmp_path / "merged")
    # A folder whose summary holds no length below the default needs no context: merged as before, model or none.
    plain = [_old_merge_folder(tmp_path / f"plain{m}", model_folder, [m], summary_seq_len=32) for m in (1, 2)]
    merge_sweeps(plain, tmp_path / "plain")
    assert "support_seq_len" not in store.read_settings(tmp_path / "plain")


def test_a_resume_naming_another_word_list_is_told_the_source_that_gives_the_folders_back(tmp_path, llama):
    """A words folder resumed with a bare --source words, which means the protocol's list (pydoc_data's words under
    the ut-peft protocol, GloVe's under the published one), is refused on source.name and told the --source that
    names the folder's own list."""
    import dataclasses

    from .test_sweep import _NoBosWordTokenizer

    path = tmp_path / "words.txt"
    path.write_text("\n".join(f"alpha{i}" for i in range(50)))
    config = small_config(source=f"words:{path}", ms=[1], grid=GridConfig(lengths=[3]), num_sequences=1)
    run_sweep(config, tmp_path / "ours", model=llama, tokenizer=_NoBosWordTokenizer(), progress=False, report=False)
    with pytest.raises(ValueError, match=r"source\.name") as refused:
        bare = dataclasses.replace(config, source="words")
        run_sweep(bare, tmp_path / "ours", model=llama, tokenizer=_NoBosWordTokenizer(), progress=False)
    assert f"resume it with --source words:{path}" in str(refused.value)
    assert "a bare --source words means" in str(refused.value)
