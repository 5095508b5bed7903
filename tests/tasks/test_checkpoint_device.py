"""A checkpoint written on a GPU resumes on a machine without one."""

import pytest
import torch

from ut_peft.tasks.training import RunSettings, run

TINY = dict(task="khop", backbone="sparse-ut", width=24, layers=1, head_dim=4, steps=6, batch_size=8)
TINY.update(eval_examples=8, khop_length=8, khop_ks=[2], checkpoint_every=2, warmup_steps=1)


_SAVING_AS_CUDA: list[bool] = []


def _cuda_tag(storage):
    """Tag every storage "cuda:0" while a checkpoint is saved as if on a GPU (None otherwise: torch's own tag)."""
    return "cuda:0" if _SAVING_AS_CUDA else None


torch.serialization.register_package(0, _cuda_tag, lambda storage, location: None)


def _as_if_saved_on_cuda(path) -> None:
    """Save the checkpoint again with every storage located on "cuda:0", as a run on a GPU saves it (its weights and
    optimiser state live there): what torch.load on a machine without CUDA then meets."""
    state = torch.load(path, weights_only=False)
    _SAVING_AS_CUDA.append(True)
    try:
        torch.save(state, path)
    finally:
        _SAVING_AS_CUDA.clear()
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path, weights_only=False)


def test_a_checkpoint_saved_on_a_gpu_resumes_here_to_the_unbroken_result(tmp_path):
    """Was: torch.load read the checkpoint onto the device it was saved from, so a run paused on a GPU machine and
    resumed on one without CUDA was refused as "truncated or corrupt. Delete it to start this run over": the advice
    threw away a sound checkpoint. The checkpoint is now read onto the CPU (the optimiser state follows its weights
    to wherever the run trains), and the run resumes to the result of the unbroken one."""
    settings = RunSettings(**TINY)
    whole = run(settings, tmp_path / "whole", progress=False)
    run(settings, tmp_path / "split", progress=False, stop_after=4)
    _as_if_saved_on_cuda(tmp_path / "split" / "checkpoint.pt")
    resumed = run(settings, tmp_path / "split", progress=False)
    assert resumed["resumed_from_step"] == 4
    assert resumed["accuracy"] == whole["accuracy"] and resumed["final_train_loss"] == whole["final_train_loss"]
