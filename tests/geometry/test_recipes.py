import importlib.util
import json
from pathlib import Path

import pytest
import torch

from ut_peft.testing import tiny_model

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def load_recipe(name):
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_geometry_recipe_end_to_end(tmp_path):
    model_dir = tmp_path / "tiny"
    tiny_model("llama", seed=0).save_pretrained(model_dir)
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"fit": {"slope": 3.0}}))
    recipe = load_recipe("geometry")
    out = tmp_path / "out"
    recipe.main(
        recipe.parse(
            [
                "--model",
                str(model_dir),
                "--samples",
                "3000",
                "--support-sequences",
                "16",
                "--summary",
                str(summary),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
    )
    result = json.loads((out / "geometry.json").read_text())
    assert set(result["cells"]) == {"ball", "box"}
    ball = result["cells"]["ball"]["argmax"]
    assert ball["num_samples"] == 3000 and sum(t["count"] for t in ball["top"]) <= 3000
    assert result["bounds"]["measured_slope"] == 3.0
    assert set(result["bounds"]["ratios"]) == {
        "ball",
        "box",
        "cone",
        "ball_nonuniform",
        "box_nonuniform",
        "ball_nonuniform_conservative",
        "box_nonuniform_conservative",
    }
    assert (out / "cells.png").stat().st_size > 1000
    assert "| bound | value | bound / measured |" in (out / "geometry.md").read_text()
    # Re-summarising the saved state against another slope samples nothing and rescales the ratios.
    recipe.main(
        recipe.parse(
            [
                "--model",
                str(model_dir),
                "--from-state",
                str(out / "state.pt"),
                "--slope",
                "6",
                "--out",
                str(tmp_path / "again"),
            ]
        )
    )
    again = json.loads((tmp_path / "again" / "geometry.json").read_text())
    assert again["cells"]["ball"]["argmax"]["top"] == ball["top"]
    assert again["bounds"]["ratios"]["box"] == pytest.approx(result["bounds"]["ratios"]["box"] / 2)
    (tmp_path / "broken.json").write_text("not json")
    with pytest.raises(ValueError, match="broken.json is not an evaluator summary.json"):
        recipe.main(recipe.parse(["--from-state", str(out / "state.pt"), "--summary", str(tmp_path / "broken.json")]))
    with pytest.raises(ValueError, match="not both"):  # run() prints it as one line, exit code 2
        recipe.main(recipe.parse(["--model", str(model_dir), "--summary", str(summary), "--slope", "2"]))
    # The state knows its model: a re-summary names it (not the default), and refuses another --model.
    third = tmp_path / "third"
    recipe.main(recipe.parse(["--from-state", str(out / "state.pt"), "--slope", "6", "--out", str(third)]))
    assert json.loads((third / "geometry.json").read_text())["model"] == str(model_dir) == again["model"]
    with pytest.raises(ValueError, match="was sampled from"):
        recipe.main(recipe.parse(["--model", "x", "--from-state", str(out / "state.pt"), "--out", str(third)]))
    # A flag that decides how to sample is refused with the state's points, not dropped.
    for flag in (["--samples", "1000"], ["--seed", "3"], ["--supports", "ball"], ["--apply-final-norm"]):
        with pytest.raises(SystemExit):
            recipe.parse(["--from-state", str(out / "state.pt"), *flag, "--out", str(third)])
        assert recipe.parse([*flag, "--out", str(third)])  # the flag itself is fine: sampling uses it
    # An earlier run's results are replaced only when asked.
    resummary = ["--from-state", str(out / "state.pt"), "--slope", "2", "--out", str(third)]
    with pytest.raises(ValueError, match="holds an earlier run .geometry.json.*--overwrite"):
        recipe.main(recipe.parse(resummary))
    recipe.main(recipe.parse(resummary + ["--overwrite"]))
    assert json.loads((third / "geometry.json").read_text())["bounds"]["measured_slope"] == 2.0


def test_copy_task_recipe_end_to_end(tmp_path):
    recipe = load_recipe("copy_task")
    out = tmp_path / "copy"
    recipe.main(
        recipe.parse(
            [
                "--steps",
                "3",
                "--batch-size",
                "8",
                "--train-lengths",
                "2",
                "4",
                "--eval-lengths",
                "2",
                "4",
                "8",
                "--num-per-length",
                "4",
                "--hidden-size",
                "16",
                "--layers",
                "1",
                "--heads",
                "2",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
    )
    result = json.loads((out / "copy_task.json").read_text())
    assert set(result["runs"]) == {"full", "embeddings"}
    for run in result["runs"].values():
        assert [r["length"] for r in run["results"]] == [2, 4, 8]
        assert len(run["loss_curve"]) == 1
    assert result["runs"]["embeddings"]["trainable_parameters"] < result["runs"]["full"]["trainable_parameters"]
    assert (out / "copy_cliff.png").stat().st_size > 1000
    assert (out / "full" / "config.json").is_file() and (out / "embeddings" / "adapter_config.json").is_file()
    assert "| embeddings |" in (out / "copy_task.md").read_text()
    with pytest.raises(ValueError, match="not a saved copy model"):
        recipe.main(recipe.parse(["--backbone", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]))
    with pytest.raises(ValueError, match="train-lengths"):
        recipe.main(recipe.parse(["--train-lengths", "9", "3", "--out", str(out)]))
    with pytest.raises(ValueError, match="holds an earlier run .copy_task.json"):  # not overwritten silently
        recipe.main(recipe.parse(["--trainings", "full", "--steps", "1", "--out", str(out)]))
    with pytest.raises(ValueError, match="does not train embeddings"):  # a --backbone nothing would use
        unused = ["--trainings", "full", "--backbone", str(out / "full"), "--out", str(tmp_path / "b")]
        recipe.main(recipe.parse(unused))
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="broken.json is not a copy_task.json"):
        recipe.main(recipe.parse(["--combine", str(tmp_path / "broken.json"), "--out", str(tmp_path / "c")]))
    # Two unlabelled runs of the same steps keep their own names (their folders'), never one overwriting the other.
    for name in ("run-a", "run-b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "copy_task.json").write_text((out / "copy_task.json").read_text())
    parts = [str(tmp_path / name / "copy_task.json") for name in ("run-a", "run-b")]
    recipe.main(recipe.parse(["--combine", *parts, "--out", str(tmp_path / "both")]))
    combined = json.loads((tmp_path / "both" / "copy_task.json").read_text())["runs"]
    assert set(combined) == {f"{run} ({name})" for run in ("full", "embeddings") for name in ("run-a", "run-b")}
    with pytest.raises(ValueError, match="two runs are both named 'full \\(run-a\\)'"):
        recipe.main(recipe.parse(["--combine", parts[0], parts[0], "--out", str(tmp_path / "twice")]))
    other = json.loads((out / "copy_task.json").read_text())
    other["settings"]["train_lengths"] = [3, 9]
    (tmp_path / "run-b" / "copy_task.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match="trained on different lengths"):
        recipe.main(recipe.parse(["--combine", *parts, "--out", str(tmp_path / "mixed")]))

    # the full run's model as a fixed backbone: only fresh E, U train; its body and positions stay bit-identical
    from peft import PeftModel
    from safetensors.torch import load_file

    again = tmp_path / "reprogram"
    recipe.main(
        recipe.parse(
            [
                "--trainings",
                "embeddings",
                "--backbone",
                str(out / "full"),
                "--steps",
                "3",
                "--batch-size",
                "8",
                "--train-lengths",
                "2",
                "4",
                "--eval-lengths",
                "2",
                "4",
                "--num-per-length",
                "4",
                "--out",
                str(again),
                "--no-progress",
            ]
        )
    )
    run = json.loads((again / "copy_task.json").read_text())["runs"]["embeddings"]
    assert run["backbone"] == str(out / "full") and run["trainable_parameters"] == 2 * 30 * 16
    saved = load_file(str(again / "embeddings" / "adapter_model.safetensors"))
    assert not any("wpe" in name for name in saved)  # the positions were not trained, so not saved
    import transformers

    base = transformers.AutoModelForCausalLM.from_pretrained(str(out / "full"))
    reloaded = PeftModel.from_pretrained(
        transformers.AutoModelForCausalLM.from_pretrained(str(out / "full")), str(again / "embeddings")
    )
    body = reloaded.get_base_model().transformer
    assert torch.equal(body.h[0].attn.c_attn.weight, base.transformer.h[0].attn.c_attn.weight)
    assert torch.equal(body.wpe.weight, base.transformer.wpe.weight)
    assert not torch.equal(reloaded.get_input_embeddings()(torch.arange(30)), base.transformer.wte.weight)
