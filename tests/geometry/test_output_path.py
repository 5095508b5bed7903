import pytest
import torch

from ut_peft.geometry import OutputPath
from ut_peft.testing import tiny_config, tiny_model


def captured_head_and_norm_inputs(model, norm, input_ids):
    seen = {}
    hooks = [
        model.get_output_embeddings().register_forward_pre_hook(lambda m, a: seen.__setitem__("post", a[0])),
        norm.register_forward_pre_hook(lambda m, a: seen.__setitem__("pre", a[0])),
    ]
    try:
        with torch.no_grad():
            logits = model(input_ids=input_ids).logits
    finally:
        for h in hooks:
            h.remove()
    return seen["pre"], seen["post"], logits


@pytest.mark.parametrize(
    "family,norm_name", [("llama", "norm"), ("gpt2", "ln_f"), ("gpt_neox", "final_layer_norm"), ("gemma3", "norm")]
)
def test_path_reproduces_the_models_logits(family, norm_name):
    model = tiny_model(family, seed=1)
    norm = getattr(model.base_model, norm_name)
    ids = torch.randint(0, 97, (2, 6), generator=torch.Generator().manual_seed(0))
    pre, post, logits = captured_head_and_norm_inputs(model, norm, ids)
    post_path = OutputPath.from_model(model)
    pre_path = OutputPath.from_model(model, apply_final_norm=True)
    assert pre_path.final_norm is norm and post_path.final_norm is None
    torch.testing.assert_close(post_path.logits(post.reshape(-1, post.shape[-1])), logits.reshape(-1, 97))
    torch.testing.assert_close(
        pre_path.logits(pre.reshape(-1, pre.shape[-1])), logits.reshape(-1, 97), rtol=1e-4, atol=1e-5
    )
    # The chunked greedy decision is the argmax of those logits.
    decided = pre_path.decide(pre.reshape(-1, pre.shape[-1]), vocab_chunk=10)["argmax"]
    assert torch.equal(decided, logits.reshape(-1, 97).argmax(-1))


def test_gemma_soft_capping_is_applied():
    config = tiny_config("gemma3")
    config.final_logit_softcapping = 0.1
    torch.manual_seed(0)
    import transformers

    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(0, 97, (1, 5))
    pre, post, logits = captured_head_and_norm_inputs(model, model.base_model.norm, ids)
    path = OutputPath.from_model(model)
    assert path.softcap == 0.1
    assert float(logits.abs().max()) <= 0.1
    torch.testing.assert_close(path.logits(post[0]), logits[0])
    # Without the cap the raw head product leaves [-0.1, 0.1]: the cap really acts.
    assert float((post[0] @ path.weight.T).abs().max()) > 0.2


@pytest.mark.parametrize("family", ["granite", "cohere", "hyperclovax"])
def test_path_scales_logits_as_the_models_forward_does(family):
    """Granite divides by logits_scaling, HyperCLOVA X multiplies by the same field, Cohere by logit_scale."""
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(family)).eval()
    ids = torch.randint(0, 97, (1, 5))
    _, post, logits = captured_head_and_norm_inputs(model, model.base_model.norm, ids)
    path = OutputPath.from_model(model)
    assert path.logit_multiplier != 1.0
    torch.testing.assert_close(path.logits(post[0]), logits[0])


def test_head_bias_and_multiplier():
    path = OutputPath(torch.eye(2), bias=torch.tensor([1.0, 0.0]), logit_multiplier=2.0)
    torch.testing.assert_close(path.logits(torch.tensor([[0.0, 0.5]])), torch.tensor([[2.0, 1.0]]))
    with pytest.raises(ValueError, match="bias"):
        OutputPath(torch.eye(2), bias=torch.zeros(3))
    with pytest.raises(ValueError, match="softcap"):
        OutputPath(torch.eye(2), softcap=0.0)


def test_model_without_head_is_rejected():
    import transformers

    bare = transformers.AutoModel.from_config(tiny_config("llama"))
    with pytest.raises(ValueError, match="output head"):
        OutputPath.from_model(bare)


def test_head_offloaded_by_accelerate_reads_its_real_weights(tmp_path):
    """device_map with disk offload leaves the head's weight on ``meta``; the path must read the offloaded values."""
    from ut_peft import load_model

    model = tiny_model("llama", seed=3)
    model.save_pretrained(tmp_path / "model")
    offloaded = load_model(
        str(tmp_path / "model"),
        device_map={"model": "cpu", "lm_head": "disk"},
        offload_folder=str(tmp_path / "offload"),
    )
    assert offloaded.get_output_embeddings().weight.device.type == "meta"
    path = OutputPath.from_model(offloaded, apply_final_norm=True)
    assert path.weight.device.type == "cpu"
    torch.testing.assert_close(path.weight, model.get_output_embeddings().weight.detach())
    points = torch.randn(5, path.hidden_size, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(path.logits(points), OutputPath.from_model(model, apply_final_norm=True).logits(points))


def test_a_head_that_changes_logits_beyond_weight_bias_scaling_and_cap_is_refused():
    """Dory's lm_head multiplies each token's logit by its own learned scale: a path of the head's weight alone
    would decide other tokens than the model (silently wrong cells), so from_model refuses it, naming the head."""
    import transformers

    config = transformers.DoryConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    OutputPath.from_model(model)  # at initialisation every token's scale is 1: the path is the model's
    with torch.no_grad():
        model.get_output_embeddings().logit_scale.uniform_(0.002, 0.04)
    with pytest.raises(ValueError, match="DoryLMHead.*does not reproduce"):
        OutputPath.from_model(model)
    OutputPath.from_model(model, check=False)  # the caller's own responsibility


def test_the_check_leaves_a_training_model_in_training_mode():
    model = tiny_model("llama", seed=1).train()
    OutputPath.from_model(model)
    assert model.training


def test_soft_capping_does_not_tie_the_greedy_decision_where_tanh_saturates():
    """c tanh(z / c) is increasing, so the greedy token is the argmax of the uncapped logits; in float32 tanh
    reaches 1.0 exactly once z / c > ~9, and deciding on the capped logits tied every such point to the lowest id."""
    path = OutputPath(torch.tensor([[1.0, 0.0], [1.1, 0.0]]), softcap=30.0)
    points = torch.stack([torch.linspace(300.0, 600.0, 50), torch.zeros(50)], dim=1)
    capped = path.logits(points)
    assert bool((capped[:, 0] == capped[:, 1]).all())  # the capped logits tie: no decision left in them
    assert path.decide(points, methods=("argmax",))["argmax"].tolist() == [1] * 50
    assert path.decide(points, methods=("argmax",), vocab_chunk=1)["argmax"].tolist() == [1] * 50


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_model_on_a_gpu_is_checked_where_its_head_is():
    model = tiny_model("llama", seed=1).cuda()
    path = OutputPath.from_model(model)
    points = torch.randn(4, path.hidden_size, device="cuda")
    assert path.logits(points).device.type == "cuda"
