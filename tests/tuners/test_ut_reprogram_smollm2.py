"""The method on the real bundled SmolLM2-135M (slow: loads a 135M-parameter model)."""

import pytest
import torch
from peft import PeftModel, get_peft_model

import ut_peft
from ut_peft import UTReprogramConfig

pytestmark = pytest.mark.slow


def test_smollm2_reprograms_to_a_new_task_vocabulary(tmp_path):
    model = get_peft_model(ut_peft.load_model("smollm2-135m"), UTReprogramConfig(task_vocab_size=6))
    # A tiny task over 6 new tokens: continue a cyclic pattern whose start and step vary by row.
    starts, steps = torch.arange(8) % 6, 1 + torch.arange(8) % 2
    batch = (starts[:, None] + steps[:, None] * torch.arange(12)[None]) % 6
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(40):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    model.save_pretrained(tmp_path)
    reloaded = PeftModel.from_pretrained(ut_peft.load_model("smollm2-135m"), tmp_path)
    assert torch.equal(reloaded(input_ids=batch).logits, model(input_ids=batch).logits)
