"""benchmarks/reprogram_vs_stock_peft.py's memory count (its end-to-end run is in test_benchmarks.py)."""

from pathlib import Path

import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_memory_counts_each_storage_once(load_benchmark, tiny_model_folder, monkeypatch):
    """The backward saves the weights of its matrix products: they are weights, not activations as well."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as `python benchmarks/x.py` does, for `import harness`
    bench = load_benchmark("reprogram_vs_stock_peft.py")
    batch = torch.randint(0, 300, (2, 8), generator=torch.Generator().manual_seed(0))
    for kind in ("ours", "stock"):
        variant = bench.Variant(kind, bench.build(kind, str(tiny_model_folder), 0))
        for _ in range(2):  # the second with gradients and optimizer state alive
            variant.step(batch, timed=False)
        saved: dict = {}

        def pack(tensor, saved=saved):
            saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            variant.model(input_ids=batch, labels=batch).loss
        model, optimizer = variant.model, variant.optimizer
        state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
        tensors = [*model.parameters(), *model.buffers(), *(p.grad for p in model.parameters()), *state]
        others = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors if t is not None}
        assert set(saved) & set(others), "the tiny model's backward saves some weights (else this checks nothing)"
        memory = variant.memory()
        assert memory["activations"] == sum(nbytes for ptr, nbytes in saved.items() if ptr not in others)
        assert memory["total"] == sum(others.values()) + memory["activations"]
