import pytest
import torch
from peft import PeftModel, get_peft_model

from ut_peft import UTReprogramConfig, backbone_from_adapter, random_backbone
from ut_peft.testing import tiny_config, tiny_model


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3"])
def test_random_backbone_is_bit_reproducible_from_config_and_seed(family):
    config = tiny_config(family)
    a, b, c = random_backbone(config, seed=11), random_backbone(config, seed=11), random_backbone(config, seed=12)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)
    assert not any(p.requires_grad for p in a.parameters())


def test_random_backbone_leaves_the_global_rng_alone():
    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    random_backbone(tiny_config("llama"), seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_seed_config_and_adapter_are_the_whole_model(tmp_path):
    model = get_peft_model(random_backbone(tiny_config("qwen2"), seed=5), UTReprogramConfig(task_vocab_size=9))
    ids = torch.randint(0, 9, (2, 6))
    model.save_pretrained(tmp_path)
    rebuilt = PeftModel.from_pretrained(backbone_from_adapter(tmp_path), tmp_path)
    assert torch.equal(rebuilt(input_ids=ids).logits, model(input_ids=ids).logits)


def test_backbone_from_adapter_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        backbone_from_adapter(tmp_path)
    base = tiny_model("llama")
    base.name_or_path = "org/some-model"  # as if loaded from the Hub
    get_peft_model(base, UTReprogramConfig()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="load its base model by name"):
        backbone_from_adapter(tmp_path)
    with pytest.raises(ValueError, match="non-negative int"):
        random_backbone(tiny_config("llama"), seed=-1)
