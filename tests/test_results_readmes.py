"""Every run folder under results/ has its line in the README beside it (tools/results_index.py)."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _index():
    spec = importlib.util.spec_from_file_location("results_index", ROOT / "tools" / "results_index.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_committed_run_folder_is_listed_in_its_readme():
    index = _index()
    assert index.model_dirs(), "results/ should hold run folders"
    assert {str(d.relative_to(ROOT)): index.missing(d) for d in index.model_dirs() if index.missing(d)} == {}


def test_a_new_run_folder_is_missing_until_the_readme_is_written(tmp_path, monkeypatch):
    index = _index()
    monkeypatch.setattr(index, "ROOT", tmp_path)
    model_dir = tmp_path / "results" / "tiny"
    (model_dir / "run-a").mkdir(parents=True)
    settings = {"protocol": "published", "source": {"kind": "words", "name": "glove-6b:100000"}, "ms": [1, 3]}
    settings.update(design={"kind": "pooled", "version": 7}, cram={"max_steps": 3000, "autocast": "auto"})
    (model_dir / "run-a" / "settings.json").write_text(json.dumps(settings))
    (model_dir / "run-a" / "PAUSED").write_text("paused since today (another job has the cores): resume with x.sh")
    (model_dir / "README.md").write_text("# tiny\n\nWhy these runs.\n")
    assert index.missing(model_dir) == ["run-a"] and index.main(["--check"]) == 1
    assert index.main([]) == 0 and index.missing(model_dir) == []
    text = (model_dir / "README.md").read_text()
    assert text.startswith("# tiny\n\nWhy these runs.\n")  # the hand-written part is kept
    assert "published protocol, glove-6b:100000, pooled v7 design, m = 1, 3, cap 3000, float32 on CPU" in text
    assert "| paused since today |" in text
    index.main([])  # a second pass rewrites the table in place, once
    assert (model_dir / "README.md").read_text() == text
