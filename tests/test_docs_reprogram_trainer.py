"""docs/reprogram.md's transformers.Trainer example runs as it stands: the loss falls and TensorBoard gets it."""

import re
from pathlib import Path

import pytest
import torch

DOC = Path(__file__).resolve().parents[1] / "docs" / "reprogram.md"


def trainer_example() -> str:
    text = DOC.read_text(encoding="utf-8")
    marker = text.index("<!-- the test runs the next python block -->")
    return re.search(r"```python\n(.*?)```", text[marker:], re.S).group(1)


def test_the_trainer_example_trains_e_and_u_and_reports_to_tensorboard(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    torch.set_num_threads(1)
    monkeypatch.chdir(tmp_path)  # the example writes under runs/ where it runs
    namespace: dict = {}
    exec(compile(trainer_example(), str(DOC), "exec"), namespace)
    losses = [entry["loss"] for entry in namespace["trainer"].state.log_history if "loss" in entry]
    assert losses[0] > 0.3 and losses[-1] < 0.01, losses
    model = namespace["model"]
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trained and all("ut_reprogram" in name for name in trained), trained
    (logdir,) = (tmp_path / "runs" / "trainer-demo" / "runs").iterdir()
    events = EventAccumulator(str(logdir))
    events.Reload()
    logged = [e.value for e in events.Scalars("train/loss")]
    assert len(logged) == len(losses) and logged[-1] == pytest.approx(losses[-1], rel=1e-4)
    assert (tmp_path / "runs" / "trainer-demo" / "adapter" / "adapter_model.safetensors").is_file()
