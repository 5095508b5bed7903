"""An adapter knows its base: the whole architecture config and a digest of the frozen weights it reads; and its own
file: a checksum that loading verifies. Each case used to load without a word and give other logits."""

import json
import math
import warnings

import pytest
import torch
from peft import PeftModel, get_peft_model

import ut_peft  # noqa: F401  (registers UT_REPROGRAM)
from ut_peft import UTReprogramConfig, random_backbone
from ut_peft.testing import tiny_config, trained_adapter
from ut_peft.tuners.ut_reprogram.fingerprint import frozen_weights_digest

IDS = torch.randint(0, 97, (2, 7), generator=torch.Generator().manual_seed(0))


def llama(seed=0, **changes):
    """The tiny Llama drawn under ``seed`` (``random_backbone`` records the seed), with config ``changes``."""
    config = tiny_config("llama")
    for key, value in changes.items():
        setattr(config, key, value)
    return random_backbone(config, seed=seed)


def perturbed(model, name):
    with torch.no_grad():
        model.get_parameter(name).add_(0.1)
    return model


@pytest.mark.parametrize(
    "other,what",
    [
        # Same model_type, depth, width, vocabulary and tying: the five keys recorded before all agreed.
        (lambda: llama(num_attention_heads=8), "num_attention_heads: adapter's base 4, this base 8"),
        (lambda: llama(intermediate_size=96), "intermediate_size: adapter's base 64, this base 96"),
        (lambda: llama(rms_norm_eps=1e-3), "rms_norm_eps: adapter's base 1e-06, this base 0.001"),
        (lambda: llama(seed=1), r"the frozen weights differ \(random backbone seed: adapter's base 0"),
        (lambda: perturbed(llama(), "model.layers.1.mlp.up_proj.weight"), "the frozen weights differ"),
    ],
)
def test_a_base_with_other_heads_mlp_width_or_weights_is_refused_naming_what_differs(tmp_path, other, what):
    model = trained_adapter(llama())
    model.save_pretrained(tmp_path)
    with torch.no_grad():  # the difference is real: the frozen model computes other logits
        assert not torch.allclose(other()(input_ids=IDS).logits, llama()(input_ids=IDS).logits)
    with pytest.raises(ValueError, match=rf"another base model than this one \([^)]*{what}.*check_base=False"):
        PeftModel.from_pretrained(other(), tmp_path)
    with pytest.warns(UserWarning, match=rf"check_base=False: loading this adapter onto another base.*{what}"):
        forced = PeftModel.from_pretrained(other(), tmp_path, check_base=False)
    assert forced.peft_config["default"].check_base is False


def test_the_same_base_loads_silently_and_in_bfloat16_too(tmp_path):
    model = trained_adapter(llama())
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "adapter_config.json").read_text())
    assert saved["base_weights_digest"].startswith("sha256:bf16:1:")  # a tiny base is hashed whole
    assert saved["base_model_config"]["intermediate_size"] == 64 and "_name_or_path" not in saved["base_model_config"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        loaded = PeftModel.from_pretrained(llama(), tmp_path)
    assert torch.equal(loaded(input_ids=IDS).logits, model(input_ids=IDS).logits)
    # The same weights held in bfloat16 are the same base (the digest is taken in bfloat16).
    PeftModel.from_pretrained(llama().to(torch.bfloat16), tmp_path)


def test_tables_the_adapter_replaces_are_not_part_of_the_fingerprint_but_tables_it_reads_are(tmp_path):
    # E and U trained: the base's own E and U never reach the outputs, so another E is no other base.
    trained_adapter(llama()).save_pretrained(tmp_path / "both")
    PeftModel.from_pretrained(perturbed(llama(), "model.embed_tokens.weight"), tmp_path / "both")
    # Memory rows only: the base's E embeds every other token, so another E is another base.
    get_peft_model(
        llama(),
        UTReprogramConfig(train_input_embeddings=False, train_output_embeddings=False, num_memory_tokens=2),
    ).save_pretrained(tmp_path / "memory")
    with pytest.raises(ValueError, match="the frozen weights differ"):
        PeftModel.from_pretrained(perturbed(llama(), "model.embed_tokens.weight"), tmp_path / "memory")


def test_an_adapter_file_with_flipped_bytes_of_the_same_length_is_refused_naming_it(tmp_path):
    model = trained_adapter(llama())
    model.save_pretrained(tmp_path)
    weights = tmp_path / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF  # a tensor byte: safetensors reads the file without an error
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"{weights} is not the file this adapter was saved with"):
        PeftModel.from_pretrained(llama(), tmp_path)
    # torch.save format too
    model.save_pretrained(tmp_path / "bin", safe_serialization=False)
    weights = tmp_path / "bin" / "adapter_model.bin"
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="adapter_model.bin is not the file this adapter was saved with"):
        PeftModel.from_pretrained(llama(), tmp_path / "bin")


def test_an_adapter_saved_before_fingerprints_loads_with_the_checks_it_can_have(tmp_path):
    model = trained_adapter(llama())
    model.save_pretrained(tmp_path)
    config_file = tmp_path / "adapter_config.json"
    record = json.loads(config_file.read_text())
    # What ut-peft wrote before: five keys of the base, no digest, no checksum, a backbone without dtype.
    five = ("model_type", "num_hidden_layers", "hidden_size", "vocab_size", "tied_embeddings")
    record["base_model_config"] = {key: record["base_model_config"][key] for key in five}
    for key in ("base_weights_digest", "weights_sha256"):
        del record[key]
    for key in ("dtype", "rebuildable"):
        record["backbone"].pop(key, None)
    config_file.write_text(json.dumps(record))
    loaded = PeftModel.from_pretrained(llama(), tmp_path)
    assert torch.equal(loaded(input_ids=IDS).logits, model(input_ids=IDS).logits)
    with pytest.raises(ValueError, match="num_hidden_layers: adapter's base 2, this base 3"):
        PeftModel.from_pretrained(llama(num_hidden_layers=3), tmp_path)
    with pytest.raises(ValueError, match="random backbone seed: adapter's base 0, this base 1"):
        PeftModel.from_pretrained(llama(seed=1), tmp_path)
    PeftModel.from_pretrained(llama(num_attention_heads=8), tmp_path)  # what it never recorded, it cannot see


def test_the_digest_covers_every_tensor_up_to_the_limit_then_a_fixed_sample(monkeypatch):
    from ut_peft.tuners.ut_reprogram import fingerprint

    base = llama()
    whole = frozen_weights_digest(base)
    assert whole.startswith("sha256:bf16:1:")
    size = sum(p.numel() for p in base.parameters())
    monkeypatch.setattr(fingerprint, "FULL_DIGEST_ELEMENTS", size // 3)
    sampled = frozen_weights_digest(base)
    stride = math.ceil(size / (size // 3))  # a little over 3x the limit: every 4th element
    assert stride == 4 and sampled.startswith(f"sha256:bf16:{stride}:") and sampled != whole
    assert frozen_weights_digest(base, stride=1) == whole  # a recorded digest's stride is the one compared with


def test_the_refusal_names_ways_to_load_anyway_that_work_for_from_pretrained_and_load_adapter(tmp_path):
    """peft's load_adapter passes only Hub keywords to the config, so load_adapter(..., check_base=False) is refused
    all the same; the message used to tell users to pass it. What it says now works for both entry points."""
    model = trained_adapter(llama())
    model.save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = PeftModel.from_pretrained(llama(seed=1), tmp_path, check_base=False)(input_ids=IDS).logits
    other = get_peft_model(llama(seed=1), UTReprogramConfig())
    with pytest.raises(ValueError) as refused:
        other.load_adapter(tmp_path, adapter_name="x", check_base=False)
    message = str(refused.value)
    assert "PeftModel.from_pretrained(base, folder, check_base=False)" in message
    assert "load_adapter(folder, name, check_base=False) is refused" in message
    assert list(other.peft_config) == ["default"]
    # The way the message gives for a PeftModel that has an adapter already.
    assert "peft_model.add_adapter(name, UTReprogramConfig.from_pretrained(folder, check_base=False))" in message
    assert "then peft_model.load_adapter(folder, name)" in message
    # add_adapter makes a new adapter (nothing loaded yet); the load that follows warns.
    other.add_adapter("x", UTReprogramConfig.from_pretrained(tmp_path, check_base=False))
    with pytest.warns(UserWarning, match="check_base=False: loading this adapter onto another base"):
        other.load_adapter(tmp_path, adapter_name="x")
    other.set_adapter("x")
    assert torch.equal(other(input_ids=IDS).logits, expected)
    help_text = UTReprogramConfig.__dataclass_fields__["check_base"].metadata["help"]
    assert "load_adapter(folder, name, check_base=False) checks the base all the same" in help_text


def test_a_save_through_transformers_which_writes_the_config_first_is_never_refused(tmp_path, monkeypatch):
    """transformers' save_pretrained of a model carrying the adapter writes adapter_config.json before the weights:
    the checksum recorded was the previous file's (or none), and a second save was refused as damaged."""
    import transformers.integrations.peft as transformers_peft

    # transformers 5 asks for peft >= 0.22 on this path (0.21 saves it the same way); pyproject allows peft >= 0.20.
    monkeypatch.setattr(transformers_peft, "check_peft_version", lambda *args, **kwargs: None)
    trained_adapter(llama()).save_pretrained(tmp_path / "src")
    base = llama()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base.load_adapter(str(tmp_path / "src"))
    for _ in range(2):  # the second save overwrites the first's weights file
        with torch.no_grad():
            base.model.embed_tokens.ut_reprogram_embedding["default"].add_(1.0)
        expected = base(input_ids=IDS).logits
        base.save_pretrained(tmp_path / "out")
        # This path cannot record the weights it writes after the config: it records none (and no stale one).
        assert json.loads((tmp_path / "out" / "adapter_config.json").read_text())["weights_sha256"] is None
        assert torch.equal(PeftModel.from_pretrained(llama(), tmp_path / "out")(input_ids=IDS).logits, expected)


def test_a_weights_file_left_by_an_earlier_save_is_never_vouched_for_and_refused_at_load(tmp_path):
    """A save with safe_serialization=False into a folder holding an earlier adapter_model.safetensors: peft loads
    the old file in preference to the new .bin, and its checksum was recorded as valid."""
    model = trained_adapter(llama())
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:
                param.add_(1.0)
    with pytest.warns(UserWarning, match="adapter_model.safetensors was left by an earlier save.*refused"):
        model.save_pretrained(tmp_path, safe_serialization=False)
    recorded = json.loads((tmp_path / "adapter_config.json").read_text())["weights_sha256"]
    assert list(recorded) == ["adapter_model.bin"]
    stale = tmp_path / "adapter_model.safetensors"
    with pytest.raises(
        ValueError,
        match=rf"{stale} is not the weights file .* was saved with .*adapter_model.bin.*"
        rf"earlier save.*Delete {stale}",
    ):
        PeftModel.from_pretrained(llama(), tmp_path)
    stale.unlink()
    assert torch.equal(PeftModel.from_pretrained(llama(), tmp_path)(input_ids=IDS).logits, model(input_ids=IDS).logits)
    # The other way round: peft loads the new safetensors file; the old .bin is not recorded, the save warns.
    with pytest.warns(UserWarning, match="adapter_model.bin was left by an earlier save.*pushed"):
        model.save_pretrained(tmp_path)
    recorded = json.loads((tmp_path / "adapter_config.json").read_text())["weights_sha256"]
    assert list(recorded) == ["adapter_model.safetensors"]
    assert torch.equal(PeftModel.from_pretrained(llama(), tmp_path)(input_ids=IDS).logits, model(input_ids=IDS).logits)


@pytest.mark.parametrize(
    "made_in,loaded_in,hint",
    [
        # Was refused with "the frozen weights differ" alone: the same checkpoint in float32 looked like another base.
        (torch.float16, torch.float32, r"made on a float16 copy of its base.*dtype=torch.float16"),
        (torch.float16, torch.bfloat16, r"made on a float16 copy of its base.*dtype=torch.float16"),
        (torch.float32, torch.float16, r"made on a float32 copy of its base.*dtype=torch.float32"),
    ],
)
def test_a_float16_copy_of_the_same_base_is_refused_saying_which_dtype_loads_it(tmp_path, made_in, loaded_in, hint):
    trained_adapter(llama().to(made_in)).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "adapter_config.json").read_text())["base_model_config"]["dtype"] == str(
        made_in
    ).removeprefix("torch.")
    with pytest.raises(ValueError, match=rf"the frozen weights differ \(compared in bfloat16.*{hint}"):
        PeftModel.from_pretrained(llama().to(loaded_in), tmp_path)
    PeftModel.from_pretrained(llama().to(made_in), tmp_path)  # the dtype it names loads it
