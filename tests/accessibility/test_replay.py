"""Every committed sweep folder under results/ reports again exactly, and the pooled design replays its own stop.

The safety net for moving code in ``ut_peft/accessibility``: a folder's ``summary.json`` is a function of its rows,
its settings and (for the support bounds) the model, so writing it again with today's code, from a copy of the
folder, through :func:`~ut_peft.accessibility.sweep.summarize_folder` (what ``ut-peft cram --report-only`` runs,
here without the plots), must give back every number the committed one holds.

Two kinds of number are compared otherwise than to a relative 1e-9, each for a stated reason:

- :data:`FLOAT32_KEYS`, what the model's float32 forward pass measures (the support of the final hidden states and
  the bounds and ratios computed from it): machines and kernels round a 30-layer float32 forward differently, by
  about 1e-7 relative between the machines that wrote results/, so these are compared to 1e-5 (one support sequence
  more or less moves them by 1e-3 and more).
- ``data/replay_erratum.json``: numbers a committed summary holds that today's code writes otherwise, each listed
  with both values and a reason. Each entry pins the value today's code gives, so it is no looser than the rest; an
  entry the committed summary no longer needs (the folder's summary written again) fails until it is removed.

One key may be written today where a committed summary has none: a per-m ``n50_range`` (the published least
squares' ridge of exact fits, kept since summaries store it), which must then be the range the report reads off the
committed entry (:func:`~ut_peft.accessibility.stats.fit.sigmoid_ridge`), so that report.md prints it either way.
Likewise a per-m ``fit_status_published_rows`` and ``n50_range_rows`` (the published least squares over rows' status
and ridge, kept since summaries store them), which must then be what that fit gives on the committed entry's fractions
and counts, as the report fits it again for a summary without them.

The pooled folders run in the default suite (one model load and one support measurement, under a minute on the
shared 2-core machine); the rest are ``slow`` (``pytest -m slow tests/accessibility/test_replay.py``). A folder
whose model this machine cannot load is skipped, saying why (``-rs`` prints it); every other difference fails.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ut_peft.accessibility import store, sweep
from ut_peft.accessibility.config import SweepConfig
from ut_peft.accessibility.design import make_design
from ut_peft.accessibility.stats.fit import fit_sigmoid, sigmoid, sigmoid_ridge
from ut_peft.accessibility.sweep import replayed_rows, summarize_folder

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
DATA = Path(__file__).parent / "data"
ERRATUM = DATA / "replay_erratum.json"
RELATIVE = 1e-9
FLOAT32_RELATIVE = 1e-5
FLOAT32_KEYS = frozenset({"support.radius", "support.eps", "bounds.ball", "bounds.box", "ratios.ball", "ratios.box"})
SMOLLM2_POOLED = RESULTS / "smollm2-135m" / "pooled-words-v7"


def committed_folders() -> list[Path]:
    """The folders under results/ whose settings.json, rows.jsonl and summary.json are committed (every folder that
    holds all three where git cannot say: an unpacked copy of the repository)."""
    names = (store.SETTINGS_FILE, store.ROWS_FILE, store.SUMMARY_FILE)
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "results"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout.decode()
        files = {ROOT / name for name in listed.split("\0") if name}
    except (OSError, subprocess.SubprocessError):
        files = {path for name in names for path in RESULTS.rglob(name)}
    return sorted({path.parent for path in files if all(path.parent / name in files for name in names)})


def is_pooled(folder: Path) -> bool:
    design = json.loads((folder / store.SETTINGS_FILE).read_text()).get("design") or {}
    return design.get("kind") == "pooled"


FOLDERS = [
    pytest.param(folder, id=str(folder.relative_to(RESULTS)), marks=() if is_pooled(folder) else pytest.mark.slow)
    for folder in committed_folders()
]


def differences(new, old, path: str = "") -> list[tuple[str, object, object]]:
    """Every (key, new value, committed value) where ``new`` and ``old`` differ: dicts key by key (a key on one side
    only is a difference), lists item by item, floats to :data:`RELATIVE` (:data:`FLOAT32_RELATIVE` for
    :data:`FLOAT32_KEYS`), everything else exactly (True is not 1)."""
    if isinstance(new, dict) and isinstance(old, dict):
        found = []
        for key in sorted(set(new) | set(old), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in new or key not in old:
                found.append((where, new.get(key, "<missing>"), old.get(key, "<missing>")))
            else:
                found += differences(new[key], old[key], where)
        return found
    if isinstance(new, list) and isinstance(old, list):
        if len(new) != len(old):
            return [(f"{path} (length)", len(new), len(old))]
        return [d for k, (a, b) in enumerate(zip(new, old)) for d in differences(a, b, f"{path}[{k}]")]
    if _number(new) and _number(old) and (isinstance(new, float) or isinstance(old, float)):
        return (
            [] if same_number(new, old, FLOAT32_RELATIVE if path in FLOAT32_KEYS else RELATIVE) else [(path, new, old)]
        )
    return [] if type(new) is type(old) and new == old else [(path, new, old)]


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def same_number(a, b, relative: float = RELATIVE) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=relative, abs_tol=0.0)


def erratum_for(folder: Path) -> dict:
    return json.loads(ERRATUM.read_text())["folders"].get(str(folder.relative_to(RESULTS)), {})


@pytest.fixture(scope="module")
def models():
    """Each model loaded once for the folders that share it (None: this machine cannot load it, with the reason)."""
    return {}


def model_for(name: str, models: dict):
    if name not in models:
        from ut_peft.models import load_model

        try:
            models[name] = (load_model(name), None)
        except (ModuleNotFoundError, FileNotFoundError, OSError) as err:  # a wheel or a hub copy this machine lacks
            models[name] = (None, f"{type(err).__name__}: {err}")
    model, missing = models[name]
    if model is None:
        pytest.skip(f"the report needs model {name!r}, which this machine cannot load ({missing})")
    return model


@pytest.fixture(scope="module")
def supports():
    return {}


def replay(folder: Path, copy: Path, models: dict, supports: dict, monkeypatch) -> dict:
    """``folder``'s summary.json written again from a copy at ``copy`` (its files, not its vectors or snapshots,
    with the model's published bound estimate beside it as in results/<model>/), as written."""
    copy.mkdir(parents=True)
    for path in folder.iterdir():
        if path.is_file():
            shutil.copy2(path, copy / path.name)
    beside = folder.parent / "bounds-published.json"
    if beside.is_file():
        shutil.copy2(beside, copy.parent / beside.name)
    committed = json.loads((folder / store.SUMMARY_FILE).read_text())
    model = model_for(committed["settings"]["model"], models)
    measure = sweep.measure_support

    def measured_once(model, **kwargs):  # deterministic in the model and its arguments: folders of one model share it
        key = (id(model), tuple(sorted(kwargs.items())))
        if key not in supports:
            supports[key] = measure(model, **kwargs)
        return supports[key]

    monkeypatch.setattr(sweep, "measure_support", measured_once)
    support = committed["support"]  # the folder was reported on this many random sequences of this length
    summarize_folder(
        copy, model, support_sequences=support["num_samples"], support_seq_len=support["seq_len"], report=False
    )
    return json.loads((copy / store.SUMMARY_FILE).read_text())


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_committed_folder_reports_again_exactly(folder, tmp_path, models, supports, monkeypatch):
    committed = json.loads((folder / store.SUMMARY_FILE).read_text())
    new = replay(folder, tmp_path / folder.parent.name / folder.name, models, supports, monkeypatch)
    erratum = erratum_for(folder)
    problems = []
    found = [
        d
        for d in differences(new, committed)
        if not stored_ridge(d, committed) and not stored_digest(d, folder) and not stored_rows_fit(d, committed)
    ]
    for key, now, before in found:
        entry = erratum.get(key)
        if entry is None:
            problems.append(f"{key}: {now!r} now, {before!r} committed")
        elif not (same_number(now, entry["now"]) and same_number(before, entry["committed"])):
            problems.append(f"{key}: {now!r} now, {before!r} committed; the erratum expects {entry}")
    differing = {key for key, _, _ in found}
    for key, entry in erratum.items():
        if key not in differing:
            problems.append(f"{key}: listed in {ERRATUM.name} but no longer differs ({entry}): remove the entry")
    problems += unequal_optima(new, committed, erratum)
    assert not problems, f"{folder.relative_to(ROOT)} reports otherwise than its summary.json:\n" + "\n".join(problems)


def stored_digest(difference: tuple[str, object, object], folder: Path) -> bool:
    """Whether ``difference`` is the ``rows_digest`` written today into a summary committed before summaries stored
    it, holding the digest of the folder's committed rows."""
    key, now, before = difference
    return key == "rows_digest" and before == "<missing>" and now == store.rows_digest(store.read_rows(folder))


def stored_ridge(difference: tuple[str, object, object], committed: dict) -> bool:
    """Whether ``difference`` is an ``n50_range`` written today at an m of a summary committed before summaries
    stored it, holding the range its report reads off that m's committed fractions and fit (to :data:`RELATIVE`)."""
    key, now, before = difference
    if before != "<missing>" or not (key.startswith("per_m[") and key.endswith("].n50_range")):
        return False
    entry = committed["per_m"][int(key[len("per_m[") : -len("].n50_range")])]
    read_off = sigmoid_ridge(
        entry["lengths"], entry["accessibility"], entry["n50_published"], entry["sigmoid_slope_published"]
    )
    return (
        isinstance(now, list)
        and read_off is not None
        and len(now) == len(read_off)
        and all((a is b is None) or (None not in (a, b) and same_number(a, b)) for a, b in zip(now, read_off))
    )


# A summary's per-m key for the over-rows fit, and the key of fit_sigmoid's answer it holds.
ROWS_FIT_KEYS = {"fit_status_published_rows": "status", "n50_range_rows": "n50_range"}


def stored_rows_fit(difference: tuple[str, object, object], committed: dict) -> bool:
    """Whether ``difference`` is a ``fit_status_published_rows`` or ``n50_range_rows`` written today at an m of a
    summary committed before summaries stored them, holding what the least squares over rows gives on that m's
    committed fractions and counts (what its report fits again)."""
    key, now, before = difference
    name = key.rsplit(".", 1)[-1]
    if before != "<missing>" or not key.startswith("per_m[") or name not in ROWS_FIT_KEYS:
        return False
    entry = committed["per_m"][int(key[len("per_m[") :].split("]")[0])]
    if len(set(entry["num_sequences"])) < 2:  # equal counts: the paper's fit is the one over rows, none is made
        return False
    again = fit_sigmoid(entry["lengths"], entry["accessibility"], entry["num_sequences"])
    expected = again.get(ROWS_FIT_KEYS[name])
    if name == "fit_status_published_rows":
        return now == expected
    return (
        isinstance(now, list)
        and isinstance(expected, list)
        and len(now) == len(expected)
        and all((a is b is None) or (None not in (a, b) and same_number(a, b)) for a, b in zip(now, expected))
    )


def unequal_optima(new: dict, committed: dict, erratum: dict) -> list[str]:
    """The erratum's reason, checked: at every m whose published sigmoid it lists, the committed (n_50, slope) and
    today's fit that m's fractions with the same squared error (two points of one least-squares optimum)."""
    problems = []
    for k in sorted({int(key[len("per_m[") :].split("]")[0]) for key in erratum if key.startswith("per_m[")}):
        a, b = new["per_m"][k], committed["per_m"][k]
        errors = [
            float(((sigmoid(a["lengths"], x0, s) - np.asarray(a["accessibility"])) ** 2).sum())
            for x0, s in (
                (a["n50_published"], a["sigmoid_slope_published"]),
                (b["n50_published"], b["sigmoid_slope_published"]),
            )
        ]
        if not math.isclose(*errors, rel_tol=1e-9, abs_tol=1e-9):
            problems.append(
                f"per_m[{k}]: today's published sigmoid has squared error {errors[0]!r}, "
                f"the committed one {errors[1]!r}"
            )
    return problems


def test_every_committed_folder_is_replayed_and_the_pooled_ones_by_default():
    folders = committed_folders()
    if not folders:
        pytest.skip("no committed sweep folder under results/ (not a checkout of the repository)")
    assert SMOLLM2_POOLED in folders and is_pooled(SMOLLM2_POOLED)
    erratum = json.loads(ERRATUM.read_text())["folders"]
    unknown = set(erratum) - {str(f.relative_to(RESULTS)) for f in folders}
    assert not unknown, f"{ERRATUM.name} names folders that are not committed sweeps: {sorted(unknown)}"


def test_the_pooled_design_replays_the_smollm2_words_run_round_for_round():
    """The committed SmolLM2 random-words run (version 7, 92 rows): the design built from its settings asks for its
    rows in the same 13 rounds as when it ran (data/pooled_words_v7_rounds.json), asks for none beyond them, and its
    stop state is the one summary.json recorded; one round earlier it asks for exactly that last round."""
    if not SMOLLM2_POOLED.is_dir():
        pytest.skip(f"{SMOLLM2_POOLED} is not here (not a checkout of the repository)")
    settings = store.read_settings(SMOLLM2_POOLED)
    rows = store.read_rows(SMOLLM2_POOLED)
    recorded = json.loads((SMOLLM2_POOLED / store.SUMMARY_FILE).read_text())["pooled"]["stop"]
    rounds = [[tuple(job) for job in jobs] for jobs in json.loads((DATA / "pooled_words_v7_rounds.json").read_text())]
    design = make_design(SweepConfig.from_settings(settings))
    assert design.rounds(rows) == rounds
    assert sorted(job for jobs in rounds for job in jobs) == sorted(rows)  # every committed row, each in one round
    assert design.next_jobs(rows) == []  # stopped
    assert replayed_rows(design, rows).keys() == rows.keys()
    state = design.stop_state(rows)
    assert state["stage"] == "stopped" and (state["rounds"], state["rows"]) == (13, 92)
    assert not differences(state, recorded), differences(state, recorded)
    before = {key: row for key, row in rows.items() if key not in set(rounds[-1])}
    assert sorted(design.next_jobs(before)) == sorted(rounds[-1])
    assert design.stop_state(before)["stage"] == "fitting"
