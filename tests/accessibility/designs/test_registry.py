"""Designs as plug-ins: a design registered here, in this file alone, runs a sweep, is recorded by name in the folder's
settings, reports again from the folder and is offered by ``ut-peft cram --design``; the built-in designs are found
by name and keep their old import paths."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from ut_peft.accessibility import CramConfig, GridConfig, SweepConfig, run_sweep, summarize_folder
from ut_peft.accessibility.designs import (
    available_designs,
    design_factory,
    make_design,
    register_design,
    unregister_design,
)
from ut_peft.accessibility.designs.configs import DesignConfig
from ut_peft.accessibility.store import read_rows, read_settings
from ut_peft.accessibility.sweep import replayed_rows

BUILTIN = ("fixed", "adaptive", "sequential", "pooled")


class DoublingDesign:
    """Per m, ``num_sequences`` texts at ``grid.start``, then at ``factor`` times the length while at least half of
    them cram, never beyond ``grid.stop``: a design no module of ut_peft knows."""

    factor = 2

    def __init__(self, ms, start: int, stop: int, num_sequences: int):
        self.ms, self.start, self.stop, self.num_sequences = list(ms), start, stop, num_sequences

    @classmethod
    def from_config(cls, config) -> DoublingDesign:
        return cls(config.ms, config.grid.start, config.grid.stop, config.num_sequences)

    def next_jobs(self, rows: dict) -> list[tuple[int, int, int]]:
        jobs = []
        for m in self.ms:
            n = self.start
            while n <= self.stop:
                group = [(m, n, i) for i in range(self.num_sequences)]
                missing = [job for job in group if job not in rows]
                if missing:
                    jobs += missing
                    break
                if 2 * sum(rows[job]["accessible"] for job in group) < len(group):
                    break
                n *= self.factor
        return jobs


@dataclasses.dataclass(frozen=True)
class StridedConfig(DesignConfig):
    """The strided design's own setting: the factor between its lengths."""

    kind: str = dataclasses.field(default="strided", init=False)
    factor: int = 2


class StridedDesign(DoublingDesign):
    """The doubling design with a factor of its own, read from its own config (``config.design``)."""

    config_class = StridedConfig

    @classmethod
    def from_config(cls, config) -> StridedDesign:
        design = cls(config.ms, config.grid.start, config.grid.stop, config.num_sequences)
        design.factor = config.design.factor
        return design


@pytest.fixture
def doubling():
    register_design("doubling", DoublingDesign)
    try:
        yield DoublingDesign
    finally:
        unregister_design("doubling")


def tiny_config(**overrides) -> SweepConfig:
    settings = dict(
        model="tiny-llama",
        source="tokens",
        ms=[1, 2],
        grid=GridConfig(start=2, stop=8),
        design="doubling",
        num_sequences=2,
        cram=CramConfig(max_steps=30, patience=30, batch_size=4),
        support_sequences=8,
        support_seq_len=4,
    )
    settings.update(overrides)
    return SweepConfig(**settings)


def test_a_design_registered_in_a_test_file_runs_a_sweep_and_reports_again_from_its_folder(tmp_path, llama, doubling):
    assert available_designs() == (*BUILTIN, "doubling")
    summary = run_sweep(tiny_config(), tmp_path, model=llama, progress=False)
    rows = read_rows(tmp_path)
    design = make_design(tiny_config())
    assert isinstance(design, DoublingDesign)
    assert rows and design.next_jobs(rows) == [] and replayed_rows(design, rows).keys() == rows.keys()
    assert {m for m, _, _ in rows} == {1, 2} and {n for _, n, _ in rows} <= {2, 4, 8}
    assert summary.design == "doubling" and summary.num_rows == len(rows)
    # The folder names its design, so a report (or a resume) builds the same one again from settings.json alone.
    assert read_settings(tmp_path)["design"] == {"kind": "doubling"}
    written = json.loads((tmp_path / "summary.json").read_text())
    assert json.loads(json.dumps(summarize_folder(tmp_path, llama, report=False).to_dict())) == written
    unregister_design("doubling")
    try:  # in a process that has not registered it, the folder's design is unknown, and says so
        with pytest.raises(
            ValueError, match="unknown design 'doubling', available: fixed, adaptive, sequential, pooled"
        ):
            summarize_folder(tmp_path, llama, report=False)
    finally:
        register_design("doubling", DoublingDesign)


def test_a_registered_design_with_a_config_of_its_own_records_its_settings_and_reads_them_back(tmp_path, llama):
    register_design("strided", StridedDesign)
    try:
        assert SweepConfig(design="strided", grid=GridConfig(start=2, stop=8)).design == StridedConfig(factor=2)
        with pytest.raises(ValueError, match="the strided design has no target_ci .* belongs to the sequential"):
            SweepConfig(design="strided", grid=GridConfig(start=2, stop=8), target_ci=3.0)
        config = tiny_config(design=StridedConfig(factor=3), grid=GridConfig(start=2, stop=18))
        run_sweep(config, tmp_path, model=llama, progress=False)
        assert read_settings(tmp_path)["design"] == {"kind": "strided", "factor": 3}
        again = SweepConfig.from_settings(read_settings(tmp_path))
        assert again.design == StridedConfig(factor=3) and make_design(again).factor == 3
        assert {n for _, n, _ in read_rows(tmp_path)} <= {2, 6, 18}
    finally:
        unregister_design("strided")


class FreshTextsDesign:
    """``num_sequences`` fresh texts (indices never used before) at each of two lengths, for every m."""

    @classmethod
    def from_config(cls, config) -> FreshTextsDesign:
        design = cls()
        design.ms, design.num_sequences, design.lengths = config.ms, config.num_sequences, (2, 3)
        return design

    def next_jobs(self, rows: dict) -> list[tuple[int, int, int]]:
        k = self.num_sequences
        jobs = [(m, n, j * k + i) for m in self.ms for j, n in enumerate(self.lengths) for i in range(k)]
        return [job for job in jobs if job not in rows]


def test_a_registered_design_s_groups_enter_the_fits_whatever_indices_its_texts_have(tmp_path, llama):
    """A group of num_sequences rows at an (m, n) is complete whichever sequence indices the design gave them: a design
    that draws fresh texts at every length had its groups beyond the first length left out of the summary."""
    register_design("fresh", FreshTextsDesign)
    try:
        summary = run_sweep(tiny_config(design="fresh", grid=GridConfig(start=2, stop=3)), tmp_path, model=llama)
        assert {index for _, n, index in read_rows(tmp_path) if n == 3} == {2, 3}
        assert [entry.lengths for entry in summary.per_m] == [[2, 3], [2, 3]]
    finally:
        unregister_design("fresh")


class BadSecondRoundDesign:
    """Two good jobs, then, once they are finished, ``second_round``: jobs this sweep cannot run (set per test). The
    design is asked at most ``patience`` times after its good round, so that a sweep that re-crams a finished job
    instead of refusing it ends (before the deal was checked, it looped, cramming and writing the row again each
    round)."""

    good = [(1, 2, 0), (1, 2, 1)]
    second_round: list = []
    patience = 3

    @classmethod
    def from_config(cls, config) -> BadSecondRoundDesign:
        return cls()

    def next_jobs(self, rows: dict) -> list:
        missing = [job for job in self.good if job not in rows]
        if missing:
            return missing
        self.patience -= 1
        return list(self.second_round) if self.patience >= 0 else []


@pytest.mark.parametrize(
    "second_round, why",
    [
        ([(3, 4, 0)], r"m = 3 is not among ms \[1, 2\]"),  # check_rows' own words: the same check
        ([(1, 16, 0)], "n = 16 is beyond the grid's stop = 8"),
        ([(1, 0, 0)], "n = 0 is below 1"),
        ([(1, 4, -1)], "index -1 is below 0"),
        ([(1, 2.5, 0)], r"n = 2\.5 \(float\) is not an integer"),
        ([(1, np.int64(4), 0)], r"n = np\.int64\(4\) \(int64\) is not an integer"),
        ([(1, 4)], r"not three integers \(m, n, index\)"),
        ([(1, 2, 0)], "finished already: its row is written"),
        ([(1, 4, 0), (1, 4, 0)], "dealt twice in one round"),
    ],
)
def test_a_registered_design_that_deals_a_job_the_sweep_cannot_run_is_refused_before_it_is_crammed(
    tmp_path, llama, monkeypatch, second_round, why
):
    """The jobs a design deals are checked as it deals them, by the check a resume and a report make of the rows
    (``check_rows``): a bad job stops the run before anything of its round is crammed or written, naming the design
    and the job. Before, a job outside the sweep (m = 3, n = 16) was crammed and written into rows.jsonl, the run
    ended as if nothing were wrong, and then every resume and report refused the folder (RowOutsideSweepError);
    other bad jobs crashed deep in the engine (``seed must be integer``) or after cramming (a row refusing
    np.int64), and a finished job dealt again was crammed and written again round after round, without end."""

    monkeypatch.setattr(BadSecondRoundDesign, "second_round", second_round)
    register_design("badjob", BadSecondRoundDesign)
    try:
        bad = second_round[-1]  # the job refused: the one bad job, or the second deal of a job dealt twice
        with pytest.raises(ValueError, match=why) as refused:
            run_sweep(tiny_config(design="badjob"), tmp_path, model=llama, progress=False)
        message = str(refused.value)
        assert "the badjob design (" in message and "BadSecondRoundDesign" in message
        assert f"dealt the job {bad!r}" in message
        assert "A design deals jobs (m, n, index) of integers: m among ms [1, 2], n from 1 to grid.stop = 8" in message
        # Nothing of the bad round was crammed or written: the folder holds the good round's rows, once each.
        lines = (tmp_path / "rows.jsonl").read_text().splitlines()
        assert (
            sorted(tuple(json.loads(line)[k] for k in ("m", "n", "index")) for line in lines)
            == BadSecondRoundDesign.good
        )
        assert not list(tmp_path.glob("inflight/*"))
    finally:
        unregister_design("badjob")


def test_the_command_line_offers_the_registered_designs(tmp_path):
    from ut_peft.cli.cram import parse, sweep_config

    argv = ["--model", "tiny-llama", "--source", "tokens", "--design", "halving", "--output-dir", str(tmp_path)]
    with pytest.raises(SystemExit):  # argparse: invalid choice
        parse(argv)

    @register_design("halving")
    def halving(config):  # the decorator form, on a function of the config
        return DoublingDesign.from_config(config)

    try:
        config = sweep_config(parse([*argv, "--start", "3", "--stop", "12"]))
        assert config.design.kind == "halving" and (config.grid.start, config.grid.stop) == (3, 12)
        assert isinstance(make_design(config), DoublingDesign)
    finally:
        unregister_design("halving")
    assert "halving" not in available_designs()


def test_the_built_in_designs_are_found_by_name_and_keep_their_old_import_paths():
    from ut_peft.accessibility import design as old
    from ut_peft.accessibility.designs.adaptive import AdaptiveDesign
    from ut_peft.accessibility.designs.fixed import FixedDesign
    from ut_peft.accessibility.designs.pooled import PooledDesign
    from ut_peft.accessibility.designs.sequential import SequentialDesign

    assert available_designs()[:4] == BUILTIN
    classes = {
        "fixed": FixedDesign,
        "adaptive": AdaptiveDesign,
        "sequential": SequentialDesign,
        "pooled": PooledDesign,
    }
    for name, cls in classes.items():
        assert design_factory(name) == cls.from_config
    assert (old.FixedDesign, old.AdaptiveDesign, old.SequentialDesign, old.PooledDesign) == tuple(classes.values())
    assert old.DESIGNS == BUILTIN
    config = SweepConfig(design="pooled", ms=[1, 3], grid=GridConfig(start=4, stop=50), target_slope_se=2.0)
    assert isinstance(old.make_design(config), PooledDesign) and old.make_design is make_design


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: SweepConfig(design="bisect"),
            "unknown design 'bisect', available: fixed, adaptive, sequential, pooled",
        ),
        (lambda: design_factory("bisect"), "unknown design 'bisect', available: fixed"),
        (lambda: register_design("pooled", DoublingDesign), "a design named 'pooled' is registered already"),
        (lambda: register_design("two words", DoublingDesign), "one word"),
        (lambda: register_design("broken", 3), "from_config"),
        (lambda: unregister_design("fixed"), "built-in design and stays registered"),
        (lambda: unregister_design("never-registered"), "unknown design 'never-registered'"),
    ],
)
def test_registry_mistakes_are_refused_clearly(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()
    assert available_designs() == BUILTIN


def test_a_taken_name_is_refused_until_it_is_freed(doubling):
    with pytest.raises(ValueError, match="'doubling' is registered already .*DoublingDesign"):
        register_design("doubling", lambda config: None)
    assert register_design("doubling", DoublingDesign) is DoublingDesign  # the same design again: nothing to do
