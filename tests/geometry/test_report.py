import importlib
import json

import matplotlib
import matplotlib.pyplot as plt
import pytest

import ut_peft.geometry.report as report


def test_report_neither_chooses_a_backend_nor_opens_pyplot_figures(tmp_path, monkeypatch):
    def use(backend, *args, **kwargs):
        raise AssertionError(f"matplotlib.use({backend!r}) called: a library must leave the backend to its caller")

    monkeypatch.setattr(matplotlib, "use", use)
    importlib.reload(report)  # importing the module chooses nothing
    figures = plt.get_fignums()
    rows = [{"length": n, "exact_match": 1.0 if n <= 4 else 0.0, "token_accuracy": 1.0 / n} for n in (2, 4, 8)]
    path = report.plot_copy_cliff({"full": rows}, (2, 4), tmp_path / "plots" / "cliff.png")
    assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 1000
    assert plt.get_fignums() == figures
    assert [p.name for p in path.parent.iterdir()] == ["cliff.png"]  # no temporary file left beside it


def test_write_json_takes_path_then_data_and_drops_in_memory_entries(tmp_path):
    path = report.write_json(tmp_path / "out" / "geometry.json", {"bounds": {"box": 1.5}, "_stats": object()})
    assert json.loads(path.read_text()) == {"bounds": {"box": 1.5}}
    with pytest.raises(TypeError):  # the old (data, path) order fails loudly rather than writing somewhere odd
        report.write_json({"bounds": {}}, tmp_path / "x.json")


def test_copy_table_means_over_the_trained_lengths_only():
    # Trained on 10-20, evaluated at 2 too: length 2 is no trained length, so the mean is (1.0 + 0.5) / 2.
    rows = [{"length": n, "exact_match": acc, "token_accuracy": acc} for n, acc in [(2, 0.0), (10, 1.0), (20, 0.5)]]
    run = {"train_lengths": [10, 20], "trainable_parameters": 1, "steps": 1, "seconds": 1.0, "results": rows}
    table = report.copy_markdown({"runs": {"full": run}})
    assert "| 0.75 / 0.50 / - |" in table
