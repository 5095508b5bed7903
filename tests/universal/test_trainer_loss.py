"""The universal causal LM under transformers' Trainer with gradient accumulation: its forward takes **kwargs, so the
Trainer hands it num_items_in_batch and leaves the normalisation over the accumulated micro-batches to it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

from ut_peft.universal import UniversalTransformerConfig


def _model():
    config = UniversalTransformerConfig(
        vocab_size=7, hidden_size=24, num_hidden_layers=2, num_attention_heads=2, head_dim=3, seed=1
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config)


def test_the_loss_is_divided_by_num_items_in_batch_when_given():
    model = _model()
    ids = torch.randint(0, 7, (2, 6), generator=torch.Generator().manual_seed(0))
    logits = model(input_ids=ids).logits
    summed = F.cross_entropy(logits[:, :-1].reshape(-1, 7), ids[:, 1:].reshape(-1), reduction="sum")
    loss = model(input_ids=ids, labels=ids, num_items_in_batch=torch.tensor(40)).loss
    torch.testing.assert_close(loss, summed / 40)


def _trained(tmp_path, batch_size: int, accumulation: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 7, (4, 6), generator=torch.Generator().manual_seed(1))
    rows = [{"input_ids": row, "labels": row} for row in ids]
    model = _model()
    args = TrainingArguments(
        output_dir=str(tmp_path / f"run{batch_size}"),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        learning_rate=0.5,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
    )
    Trainer(model=model, args=args, train_dataset=rows).train()
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def test_gradient_accumulation_gives_the_step_of_the_whole_batch(tmp_path):
    """Was wrong: the forward dropped num_items_in_batch, so each micro-batch's loss was its own mean while the
    Trainer, which saw **kwargs in the signature, no longer divided by the accumulation steps: with 2 steps of 2 rows
    the gradient was twice the one of 4 rows in one step (and the logged loss twice too)."""
    whole = _trained(tmp_path, batch_size=4, accumulation=1)
    accumulated = _trained(tmp_path, batch_size=2, accumulation=2)
    for name, param in whole.items():
        torch.testing.assert_close(accumulated[name], param, msg=name)
