import pytest
import torch

pytestmark = pytest.mark.slow


def test_output_path_of_the_bundled_smollm2_reproduces_its_logits():
    from ut_peft import load_model
    from ut_peft.geometry import OutputPath

    model = load_model("smollm2-135m").eval()
    seen = {}
    hook = model.get_output_embeddings().register_forward_pre_hook(lambda m, a: seen.__setitem__("h", a[0]))
    ids = torch.randint(0, 49152, (1, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    hook.remove()
    path = OutputPath.from_model(model)
    assert (path.vocab_size, path.hidden_size, path.softcap) == (49152, 576, None)
    torch.testing.assert_close(path.logits(seen["h"][0]), logits, rtol=1e-4, atol=1e-4)
    assert torch.equal(path.decide(seen["h"][0], vocab_chunk=5000)["argmax"], logits.argmax(-1))
