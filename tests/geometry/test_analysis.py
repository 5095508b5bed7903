import pytest
import torch

from ut_peft.accessibility.stats.bounds import measure_support
from ut_peft.geometry import OutputPath, analyze_model
from ut_peft.testing import tiny_model


def with_trained_norm_gains(family):
    """A tiny model whose final norm has non-unit gains, as a trained one has: a fresh norm's gains of 1 make
    norm(norm(x)) == norm(x) for RMSNorm, which hides a norm applied twice."""
    model = tiny_model(family, seed=1)
    norm = OutputPath.from_model(model, apply_final_norm=True).final_norm
    with torch.no_grad():
        norm.weight.copy_(torch.rand(norm.weight.shape, generator=torch.Generator().manual_seed(0)) * 3 + 0.1)
    return model, norm


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_apply_final_norm_measures_the_support_at_the_norms_input(family):
    model, norm = with_trained_norm_gains(family)
    measure = dict(support_sequences=32, support_seq_len=8, progress=False)
    result = analyze_model(model, num_samples=50, apply_final_norm=True, **measure)
    stats = result["_stats"]
    # The states the norm receives in the same forward passes measure_support runs.
    seen = []
    hook = norm.register_forward_pre_hook(lambda module, args: seen.append(args[0][:, -1].detach()))
    try:
        head = measure_support(model, num_sequences=32, seq_len=8)
    finally:
        hook.remove()
    pre = torch.cat(seen)
    torch.testing.assert_close(stats.hidden, pre)
    assert stats.radius == pytest.approx(float(pre.norm(dim=1).max()))
    assert result["support"]["radius"] == stats.radius and result["output_path"]["support_at"] == "final_norm_input"
    # A measured state sent through the path (norm once, then head) decodes as the model decodes it.
    decided = OutputPath.from_model(model, apply_final_norm=True).decide(stats.hidden)["argmax"]
    assert torch.equal(decided, OutputPath.from_model(model).decide(head.hidden)["argmax"])
    # Without the flag nothing changes: the head's inputs.
    plain = analyze_model(model, num_samples=50, **measure)["_stats"]
    torch.testing.assert_close(plain.hidden, head.hidden)


def test_apply_final_norm_refuses_a_model_that_changes_states_between_norm_and_head():
    model, _ = with_trained_norm_gains("llama")
    model.get_output_embeddings().register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    with pytest.raises(ValueError, match="not what the output head of LlamaForCausalLM receives"):
        analyze_model(model, num_samples=10, support_sequences=4, support_seq_len=4, apply_final_norm=True)


def test_a_state_that_normed_its_points_twice_is_refused(tmp_path):
    from ut_peft.geometry import load_state, save_state

    model, _ = with_trained_norm_gains("llama")
    result = analyze_model(
        model, num_samples=20, support_sequences=4, support_seq_len=4, apply_final_norm=True, progress=False
    )
    save_state(result, tmp_path / "state.pt")
    assert load_state(tmp_path / "state.pt")[2]["support_at"] == "final_norm_input"
    old = torch.load(tmp_path / "state.pt", weights_only=True)
    del old["output_path"]["support_at"]  # as saved before the support was measured at the norm's input
    torch.save(old, tmp_path / "old.pt")
    with pytest.raises(ValueError, match="went through the final norm twice"):
        load_state(tmp_path / "old.pt")


def test_a_re_summary_keeps_the_supports_sequence_length(tmp_path):
    from ut_peft.geometry import load_state, save_state, summarize

    model = tiny_model("llama", seed=0)
    result = analyze_model(model, num_samples=20, support_sequences=4, support_seq_len=6, progress=False)
    assert result["support"]["seq_len"] == 6
    save_state(result, tmp_path / "state.pt")
    stats, estimates, path_info, seed = load_state(tmp_path / "state.pt")
    assert summarize(stats, estimates, path_info, 2.0, seed=seed)["support"] == result["support"]


def test_one_support_sequence_is_refused_before_any_sampling(monkeypatch):
    """One state has no cone (no pair to take an angle of) and its box is a point: refused up front, not after
    the cells were sampled (minutes at 10^6 points)."""
    import ut_peft.geometry.analysis as analysis

    def no_sampling(*args, **kwargs):
        raise AssertionError("sampled before refusing")

    monkeypatch.setattr(analysis, "estimate_cells", no_sampling)
    with pytest.raises(ValueError, match="support_sequences must be >= 2"):
        analyze_model(tiny_model("llama", seed=1), num_samples=50, support_sequences=1, progress=False)


def test_a_single_sample_reports_without_a_convergence_check():
    from ut_peft.geometry.report import geometry_markdown

    result = analyze_model(tiny_model("llama", seed=1), num_samples=1, support_sequences=4, progress=False)
    text = geometry_markdown(result)
    assert "no convergence check" in text and "CI half-widths" not in text


def test_the_chunk_size_that_decided_the_points_is_recorded_and_survives_a_re_summary(tmp_path):
    """The points are drawn chunk by chunk, so --chunk-size (as the seed) decides which points are drawn and so the
    counts: the same seed at another chunk size gives other counts. geometry.json recorded the seed only, so a run
    could not be reproduced from it; the chunk size in effect (4096 by default) is recorded beside the seed, in the
    result and in state.pt, and a re-summary of the state reports it (None for a state saved before it was)."""
    from ut_peft.geometry import load_state, save_state, summarize

    model = tiny_model("llama", seed=0)
    small = analyze_model(model, num_samples=60, support_sequences=4, chunk_size=7, supports=("ball",), progress=False)
    default = analyze_model(model, num_samples=60, support_sequences=4, supports=("ball",), progress=False)
    assert not torch.equal(
        small["_estimates"]["ball"]["argmax"].counts, default["_estimates"]["ball"]["argmax"].counts
    )
    assert (small["chunk_size"], default["chunk_size"]) == (7, 4096)
    save_state(small, tmp_path / "state.pt")
    stats, estimates, path_info, seed = load_state(tmp_path / "state.pt")
    assert summarize(stats, estimates, path_info, seed=seed)["chunk_size"] == 7
    old = torch.load(tmp_path / "state.pt", weights_only=True)
    for by_method in old["estimates"].values():
        for estimate in by_method.values():
            del estimate["chunk_size"]  # as saved before the chunk size was recorded
    torch.save(old, tmp_path / "old.pt")
    stats, estimates, path_info, seed = load_state(tmp_path / "old.pt")
    assert summarize(stats, estimates, path_info, seed=seed)["chunk_size"] is None
