import re

import pytest
import torch
from peft import PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

import ut_peft
from ut_peft.universal import UniversalTransformerConfig, UniversalTransformerForCausalLM, fixed_block_weights
from ut_peft.universal.configuration import POSITIVE_INT_FIELDS


def _config(**kwargs):
    base = dict(
        vocab_size=7,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=2,
        head_dim=3,
        max_position_embeddings=16,
    )
    return UniversalTransformerConfig(**{**base, **kwargs})


@pytest.mark.parametrize("variant", ["attention_only", "residual_layernorm", "mlp"])
@pytest.mark.parametrize("weights", ["sparse", "random"])
def test_auto_class_builds_and_trains_only_embeddings(variant, weights):
    model = AutoModelForCausalLM.from_config(
        _config(variant=variant, weights=weights, position_embedding_type="learned")
    )
    assert isinstance(model, UniversalTransformerForCausalLM)
    ids = torch.randint(0, 7, (3, 9))
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)
    assert out.logits.shape == (3, 9, 7) and torch.isfinite(out.loss)
    out.loss.backward()
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"model.embed_tokens.weight", "model.position_embeddings.weight", "lm_head.weight"}
    assert all(p.grad is None for p in model.fixed_parameters().values())


def test_sparse_fixed_weights_are_zero_or_one():
    for looped, heads in [(False, 1), (False, 2), (True, 1)]:
        for variant in ("attention_only", "residual_layernorm"):
            config = _config(weights="sparse", looped=looped, num_attention_heads=heads, variant=variant)
            model = AutoModelForCausalLM.from_config(config)
            fixed = model.fixed_parameters()
            assert fixed
            for name, tensor in fixed.items():
                assert set(tensor.unique().tolist()) <= {0.0, 1.0}, name
                assert tensor.sum() > 0, name


def test_looped_backbone_shares_one_layer():
    model = AutoModelForCausalLM.from_config(_config(looped=True, num_hidden_layers=4))
    assert len(model.model.layers) == 1
    hidden = model(input_ids=torch.randint(0, 7, (1, 5)), output_hidden_states=True).hidden_states
    assert len(hidden) == 5  # the input plus 4 applications of the shared layer


def test_random_weights_depend_on_seed_only():
    a = fixed_block_weights(_config(seed=1), 0)["query"]
    assert torch.equal(a, fixed_block_weights(_config(seed=1), 0)["query"])
    assert not torch.equal(a, fixed_block_weights(_config(seed=2), 0)["query"])
    assert not torch.equal(a, fixed_block_weights(_config(seed=1), 1)["query"])


def test_rebuild_from_config_and_save_load_are_bit_identical(tmp_path):
    config = _config(variant="mlp", weights="random", seed=5)
    model = AutoModelForCausalLM.from_config(config)
    rebuilt = AutoModelForCausalLM.from_config(UniversalTransformerConfig.from_dict(config.to_dict()))
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    for name, tensor in model.fixed_parameters().items():
        assert torch.equal(tensor, rebuilt.fixed_parameters()[name]), name
        assert torch.equal(tensor, loaded.fixed_parameters()[name]), name
        assert not loaded.fixed_parameters()[name].requires_grad


def test_adapter_save_load_on_ut_backbone(tmp_path):
    config = _config(weights="sparse", num_attention_heads=1, position_embedding_type="learned")
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_config(config), ut_peft.UTReprogramConfig(train_position_embeddings=True)
    )
    ids = torch.randint(0, 7, (2, 6))
    optimizer = torch.optim.Adam([p for p in peft_model.parameters() if p.requires_grad], lr=0.1)
    for _ in range(3):
        loss = peft_model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    peft_model.save_pretrained(tmp_path)
    untrained = AutoModelForCausalLM.from_config(config)(input_ids=ids).logits
    reloaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_config(config), tmp_path)
    assert torch.equal(reloaded(input_ids=ids).logits, peft_model(input_ids=ids).logits)
    assert not torch.allclose(untrained, peft_model(input_ids=ids).logits)


def test_bad_configs_are_refused():
    with pytest.raises(ValueError, match="variant"):
        UniversalTransformerConfig(variant="transformer")
    with pytest.raises(ValueError, match="one head"):
        UniversalTransformerConfig(weights="sparse", looped=True, num_attention_heads=2)
    with pytest.raises(ValueError, match="hidden_size"):
        UniversalTransformerConfig(hidden_size=0)
    model = AutoModelForCausalLM.from_config(_config(position_embedding_type="learned"))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(input_ids=torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("seed", [1.5, True, "1", None])
def test_a_seed_that_is_not_an_integer_is_refused(seed):
    """The frozen weights were drawn from int(config.seed): seed=1.5, True and "1" all built seed 1's backbone (a sweep
    over seeds 0.5, 1, 1.5 trained one backbone twice) while config.json recorded the value given. Refused now; any
    integer, numpy's too, still draws its own backbone."""
    import numpy as np

    with pytest.raises(ValueError, match=r"seed must be an integer.*got"):
        UniversalTransformerConfig(seed=seed)
    config = _config(seed=np.int64(2))
    assert config.seed == 2 and type(config.seed) is int and '"seed": 2' in config.to_json_string()
    assert torch.equal(fixed_block_weights(config, 0)["query"], fixed_block_weights(_config(seed=2), 0)["query"])
    assert not torch.equal(fixed_block_weights(_config(seed=-2), 0)["query"], fixed_block_weights(config, 0)["query"])


def test_the_init_scales_default_to_the_references_and_refuse_non_positive_values():
    config = UniversalTransformerConfig(hidden_size=64)
    assert config.initializer_range == 0.02 and config.output_initializer_range == 64**-0.5
    model = AutoModelForCausalLM.from_config(
        UniversalTransformerConfig(hidden_size=256, position_embedding_type="learned")
    )
    assert model.model.embed_tokens.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert model.model.position_embeddings.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert model.lm_head.weight.std().item() == pytest.approx(256**-0.5, rel=0.1)
    for name in ("initializer_range", "output_initializer_range"):
        for bad in (0, -1.0, float("nan"), float("inf"), "0.02"):
            with pytest.raises(ValueError, match=f"{name} is the std .* must be a positive number"):
                UniversalTransformerConfig(**{name: bad})


def test_tie_word_embeddings_shares_one_matrix_through_training_saving_and_peft(tmp_path):
    # Was accepted and ignored: E and U stayed two matrices (no _tied_weights_keys).
    untied = AutoModelForCausalLM.from_config(_config())
    assert untied.lm_head.weight.data_ptr() != untied.model.embed_tokens.weight.data_ptr()
    model = AutoModelForCausalLM.from_config(_config(variant="residual_layernorm", tie_word_embeddings=True))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {"model.embed_tokens.weight"}
    ids = torch.randint(0, 7, (2, 5))
    model.save_pretrained(tmp_path / "base")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    peft_model = get_peft_model(model, ut_peft.UTReprogramConfig())  # kept tied: one trainable table
    assert [n for n, p in peft_model.named_parameters() if p.requires_grad] == [
        "base_model.model.model.embed_tokens.ut_reprogram_embedding.default"
    ]


def test_a_sparse_backbone_narrower_than_its_construction_says_so_and_one_that_fits_does_not():
    """At 4 heads of 32 in width 128 (the Dyck-1 rows' shape) the slots wrap until every value map is the identity:
    a backbone of its own, which must not pass silently for the construction. One head of 16 in width 160 (the k-hop
    budget rows' shape, 2 * 4 * 16 + readout <= 160) is the construction, and says nothing."""
    import warnings

    from ut_peft.universal import SparseLayoutOverlapWarning

    narrow = dict(vocab_size=5, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, head_dim=32)
    with pytest.warns(SparseLayoutOverlapWarning, match=r"needs \d+ columns, but hidden_size is 128"):
        model = AutoModelForCausalLM.from_config(UniversalTransformerConfig(weights="sparse", **narrow))
    assert all(torch.equal(v, torch.eye(128)) for layer in model.model.layers for v in layer.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SparseLayoutOverlapWarning)
        AutoModelForCausalLM.from_config(UniversalTransformerConfig(weights="random", **narrow))
        fits = dict(vocab_size=23, hidden_size=160, num_hidden_layers=4, num_attention_heads=1, head_dim=16)
        AutoModelForCausalLM.from_config(UniversalTransformerConfig(weights="sparse", **fits))


@pytest.mark.parametrize("start", ["use_cache", "inputs_embeds"])
def test_generation_that_would_need_a_key_value_cache_is_refused(start):
    """The backbone keeps no key/value cache. generate(use_cache=True), and generate from inputs_embeds (which always
    uses one), hand it a cache and then only the newest token: it generated other tokens than the whole sequence's
    argmax, without an error. Refused now, naming use_cache=False; generation without a cache stays the argmax."""
    torch.manual_seed(0)
    config = _config(variant="residual_layernorm", position_embedding_type="learned", initializer_range=1.0)
    model = AutoModelForCausalLM.from_config(config).eval()
    prompt = torch.tensor([[3, 4, 5, 6]])
    inputs = {"input_ids": prompt, "use_cache": True}
    if start == "inputs_embeds":
        inputs = {"inputs_embeds": model.get_input_embeddings()(prompt).detach()}
    with pytest.raises(ValueError, match=r"keeps no key/value cache.*use_cache=False"):
        model.generate(**inputs, max_new_tokens=6, do_sample=False)
    sequence = prompt
    with torch.no_grad():
        for _ in range(6):
            sequence = torch.cat([sequence, model(input_ids=sequence).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(model.generate(prompt, max_new_tokens=6, do_sample=False), sequence)


@pytest.mark.parametrize("variant", ["attention_only", "residual_layernorm", "mlp"])
def test_the_last_hidden_state_is_the_one_the_logits_are_read_from(variant):
    """As in transformers' own models (GPT-2, Llama), hidden_states[-1] is last_hidden_state, after the final
    LayerNorm, so lm_head(hidden_states[-1]) gives the logits. The residual variants returned the last layer's output
    before that LayerNorm there: a probe or logit lens on hidden_states[-1] read other states than the logits' without
    an error. The earlier entries stay the embeddings and each layer's output."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_config(variant=variant, weights="random", initializer_range=1.0))
    ids = torch.randint(0, 7, (2, 5))
    out = model(input_ids=ids, output_hidden_states=True)
    assert len(out.hidden_states) == 3  # the input, then one entry per layer
    assert torch.equal(out.hidden_states[-1], model.model(input_ids=ids).last_hidden_state)
    assert torch.allclose(model.lm_head(out.hidden_states[-1]), out.logits, atol=1e-6)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    assert torch.equal(out.hidden_states[1], model.model.layers[0](out.hidden_states[0], mask))


@pytest.mark.parametrize("name", POSITIVE_INT_FIELDS)
def test_a_bool_is_not_a_positive_int(name):
    """Was wrong: the shape fields checked isinstance(value, int), which True passes, so num_hidden_layers=True built
    a one-layer backbone while config.json recorded true. Refused now, naming the field."""
    with pytest.raises(ValueError, match=rf"{name} must be a positive int, got True"):
        _config(**{name: True})


def test_derived_fields_follow_the_fields_they_derive_from(tmp_path):
    """Was wrong: attention_scale, readout_size, intermediate_size and output_initializer_range were computed once in
    __init__, so changing head_dim, vocab_size or hidden_size on a built config left them at the old shape's values
    (a model built from it attended at 1/sqrt(old k) and read out to the old |V|) without a word. A field left to its
    default now follows its source at every read, config.json included, and through a save and load; a value given
    otherwise stays as given."""
    config = _config(head_dim=4, vocab_size=7, hidden_size=24)
    config.head_dim, config.vocab_size, config.hidden_size = 16, 11, 32
    assert config.attention_scale == 0.25 and config.readout_size == 11
    assert config.intermediate_size == 128 and config.output_initializer_range == 32**-0.5
    saved = config.to_dict()
    assert saved["attention_scale"] == 0.25 and saved["readout_size"] == 11 and saved["intermediate_size"] == 128
    assert not any(key.startswith("_given") for key in saved)
    config.save_pretrained(tmp_path)
    loaded = UniversalTransformerConfig.from_pretrained(tmp_path)
    loaded.head_dim, loaded.vocab_size = 4, 5  # the saved values were the derived ones: they still follow
    assert loaded.attention_scale == 0.5 and loaded.readout_size == 5
    model = AutoModelForCausalLM.from_config(loaded)
    assert model.model.readout.shape == (32, 5) and model.config.attention_scale == 0.5
    given = _config(attention_scale=0.1, readout_size=3, intermediate_size=10, output_initializer_range=0.5)
    given.head_dim, given.vocab_size, given.hidden_size = 16, 11, 32
    assert (given.attention_scale, given.readout_size, given.intermediate_size) == (0.1, 3, 10)
    assert given.output_initializer_range == 0.5
    given.attention_scale = None  # back to the default: follows head_dim again
    assert given.attention_scale == 0.25


def test_from_pretrained_refuses_a_seed_or_weights_other_than_the_checkpoints(tmp_path):
    """Was wrong: from_pretrained(folder, seed=5) loaded the checkpoint's frozen weights (seed 0's) while the config
    said seed 5, so the model and its config.json named another backbone than the one it held. The frozen weights
    are the checkpoint's, so another seed or weights kind is refused, through the Auto class too; the checkpoint's
    own values (or no override) load as before."""
    AutoModelForCausalLM.from_config(_config(seed=0)).save_pretrained(tmp_path)
    for load in (UniversalTransformerForCausalLM.from_pretrained, AutoModelForCausalLM.from_pretrained):
        with pytest.raises(ValueError, match=r"seed=5.*checkpoint.*seed=0"):
            load(tmp_path, seed=5)
        with pytest.raises(ValueError, match=r"weights='sparse'.*checkpoint.*weights='random'"):
            load(tmp_path, weights="sparse")
        assert load(tmp_path, seed=0).config.seed == 0 and load(tmp_path).config.seed == 0
    with pytest.raises(ValueError, match=r"seed=5.*checkpoint.*seed=0"):
        UniversalTransformerForCausalLM.from_pretrained(tmp_path, config=_config(seed=5))


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), True, "0.5"])
def test_an_attention_scale_that_is_not_a_finite_number_is_refused(bad):
    """attention_scale=inf built a backbone whose every attention score is NaN (0 * inf), and the compiler, whose
    c = s_target / s_backbone was then 0, reported a residual of 1e-15 for it."""
    with pytest.raises(ValueError, match="attention_scale is the softmax temperature .* must be a finite number"):
        UniversalTransformerConfig(attention_scale=bad)
    for good in (None, 0.25, -0.5, 0.0, 1):
        UniversalTransformerConfig(attention_scale=good)


@pytest.mark.parametrize(
    "weights,field,value",
    [("random", "seed", 5), ("random", "weights", "sparse"), ("sparse", "looped", True), ("sparse", "seed", 3)],
)
def test_a_draw_field_changed_after_building_is_refused_at_save(tmp_path, weights, field, value):
    """model.config.seed = 5 on a built backbone changed nothing it holds (its frozen weights stay seed 0's draw), but
    save_pretrained wrote seed 5 into config.json: the folder loaded as a seed-5 backbone holding seed 0's tensors,
    named so by its config and by every record made from it. Refused now, naming the field and both values; set
    back, the model saves and loads as before."""
    heads = 1 if field == "looped" else 2
    model = AutoModelForCausalLM.from_config(_config(weights=weights, num_attention_heads=heads, hidden_size=64))
    built = getattr(model.config, field)
    setattr(model.config, field, value)
    with pytest.raises(ValueError, match=rf"config\.{field} was changed .* from {built!r} to {value!r}"):
        model.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()
    setattr(model.config, field, built)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(loaded.model.layers[0].query, fixed_block_weights(loaded.config, 0)["query"])


@pytest.mark.parametrize(
    "built,field,value",
    [
        ({}, "num_hidden_layers", 4),  # was a bare IndexError: layers[2] of a model holding 2
        ({}, "num_hidden_layers", 1),  # was silent: the forward ran the first layer only
        ({"looped": True, "num_attention_heads": 1}, "looped", False),  # was a bare IndexError
        # was silent: layer 0 applied twice, which is no sparse looped construction
        ({"weights": "sparse", "num_attention_heads": 1}, "looped", True),
        ({}, "variant", "mlp"),  # was a bare AttributeError: no mlp_in in a block built without an MLP
        ({"variant": "mlp"}, "variant", "residual_layernorm"),
        ({}, "head_dim", 12),  # was silent: the default attention_scale moved to 1/sqrt(12) on weights 3 wide
    ],
)
def test_a_structural_field_changed_after_building_is_refused_at_the_forward(built, field, value):
    """The forward reads num_hidden_layers, looped, variant and the (default) attention_scale from the config at every
    call, but the layers it runs were built for the values the config had then. Changed after building, the forward
    stopped in a bare IndexError or AttributeError deep inside it, or quietly ran another model than the config
    names. It now refuses before any tensor work, naming the field, both values and what to do; set back, the model
    runs as built."""
    model = AutoModelForCausalLM.from_config(_config(**built))
    ids = torch.randint(0, 7, (2, 5))
    before = model(input_ids=ids).logits
    old = getattr(model.config, field)
    setattr(model.config, field, value)
    with pytest.raises(ValueError, match=rf"config\.{field} was changed .* from {old!r} to {value!r}.*from_config"):
        model(input_ids=ids)
    with pytest.raises(ValueError, match=rf"config\.{field} was changed"):
        model.simulate(torch.eye(7)[ids], model.get_input_embeddings().weight)
    setattr(model.config, field, old)
    assert torch.equal(model(input_ids=ids).logits, before)


def test_attention_scale_and_layer_norm_eps_may_change_on_a_built_backbone():
    """No frozen weight depends on attention_scale or layer_norm_eps, and save_pretrained writes them, so setting one
    on a built backbone gives the backbone a fresh build from that config is: allowed. head_dim under an explicit
    attention_scale changes nothing the forward computes, so it is allowed too."""
    model = AutoModelForCausalLM.from_config(_config(variant="residual_layernorm"))
    ids = torch.randint(0, 7, (2, 5))
    model.config.attention_scale = 0.25
    model.config.layer_norm_eps = 1e-3
    fresh = AutoModelForCausalLM.from_config(_config(variant="residual_layernorm", attention_scale=0.25))
    fresh.config.layer_norm_eps = 1e-3
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(model(input_ids=ids).logits, fresh(input_ids=ids).logits)
    before = model(input_ids=ids).logits
    assert not model.config.derives("attention_scale") and _config().derives("attention_scale")
    model.config.head_dim = 12
    assert torch.equal(model(input_ids=ids).logits, before)
    with pytest.raises(ValueError, match="'head_dim' is not a derived field"):
        model.config.derives("head_dim")


@pytest.mark.parametrize("bad", [0, 0.0, -1e-5, float("inf"), float("nan"), True, "1e-5", None])
def test_a_layer_norm_eps_that_is_not_a_positive_finite_number_is_refused(bad):
    """layer_norm_eps=-1e-5 (or 0, inf, NaN) built: the LayerNorm of a constant state divides by sqrt(var + eps), so
    its output was inf or NaN, found only in the logits (and of no use in the attention_only variant, which has no
    LayerNorm, until the variant was changed)."""
    with pytest.raises(ValueError, match=r"layer_norm_eps .* must be a positive finite number, got"):
        UniversalTransformerConfig(layer_norm_eps=bad)
    for good in (1e-5, 1e-12, 1):
        assert UniversalTransformerConfig(layer_norm_eps=good).layer_norm_eps == good


@pytest.mark.parametrize(
    "built,field,value",
    [
        ({}, "num_hidden_layers", 3),  # loaded with a layer 2 freshly drawn that the saved model never ran
        ({}, "variant", "mlp"),  # loaded with MLPs the saved model never had
        ({}, "head_dim", 4),  # a folder that no longer loads (query/key 3 wide, config 4)
        ({"attention_scale": 0.5}, "head_dim", 4),  # the forward allows this one; config.json still names 4
        ({"num_attention_heads": 1}, "looped", True),  # a random backbone: loaded as layer 0 looped
        ({"position_embedding_type": "learned"}, "position_embedding_type", "none"),  # trained positions dropped
        ({}, "position_embedding_type", "learned"),  # loaded with a random position table added
        ({"position_embedding_type": "learned"}, "max_position_embeddings", 32),  # a folder that no longer loads
    ],
)
def test_a_structural_field_changed_after_building_is_refused_at_save(tmp_path, built, field, value):
    """The forward refused a num_hidden_layers, looped, variant or head_dim changed after building, but
    save_pretrained wrote it into config.json: the folder named layers it did not hold, and loaded either as another
    model than the one saved (layers, MLPs or a position table drawn fresh, trained positions dropped) or not at all
    (a shape mismatch). Refused now before anything is written, naming the field and both values; set back, the model
    saves and loads as built."""
    model = AutoModelForCausalLM.from_config(_config(**built))
    ids = torch.randint(0, 7, (2, 5))
    before = model(input_ids=ids).logits
    old = getattr(model.config, field)
    setattr(model.config, field, value)
    with pytest.raises(ValueError, match=rf"config\.{field} was changed .* from {old!r} to {value!r}.*from_config"):
        model.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()
    setattr(model.config, field, old)
    model.save_pretrained(tmp_path)
    assert torch.equal(AutoModelForCausalLM.from_pretrained(tmp_path)(input_ids=ids).logits, before)


def _learned_positions():
    return AutoModelForCausalLM.from_config(_config(position_embedding_type="learned"))


def test_a_sequence_longer_than_the_built_position_table_is_refused_naming_both():
    """config.max_position_embeddings raised from 16 to 32 after building let a 20-token sequence past the length
    check, and the 16-row table then stopped in a bare 'IndexError: index out of range in self'. The check now reads
    the table the model holds, and the error names the length, the table's rows and the config's value."""
    model = _learned_positions()
    model.config.max_position_embeddings = 32
    with pytest.raises(ValueError, match=r"sequence length 20 .* 16 rows .*max_position_embeddings=32"):
        model(input_ids=torch.randint(0, 7, (1, 20)))
    model.config.max_position_embeddings = 16
    with pytest.raises(ValueError, match=r"sequence length 17 .* 16 rows"):
        model(input_ids=torch.randint(0, 7, (1, 17)))
    model(input_ids=torch.randint(0, 7, (1, 16)))


@pytest.mark.parametrize("bad,named", [([[10, 11, 12, 13, 16]], 16), ([[-1, 0, 1, 2, 3]], -1)])
def test_position_ids_outside_the_built_table_are_refused_naming_them(bad, named):
    """position_ids of 16 (or -1) on a 16-row table stopped in a bare IndexError inside nn.Embedding."""
    model = _learned_positions()
    ids = torch.randint(0, 7, (1, 5))
    with pytest.raises(ValueError, match=rf"position_ids hold {named}, outside .* rows 0 \.\. 15"):
        model(input_ids=ids, position_ids=torch.tensor(bad))


def test_position_ids_that_would_broadcast_over_the_sequence_are_refused():
    """position_ids of shape (1, 1) or (batch, 1) for a 5-token sequence broadcast: every position got one and the
    same position row, and the forward ran without a word. Refused now, naming both shapes; (n,), (1, n) and
    (batch, n) run as the default positions do, and ids within the table need not follow the sequence length (a
    left-padded batch longer than the table runs on positions counted from its first real token)."""
    model = _learned_positions()
    ids = torch.randint(0, 7, (3, 5))
    default = model(input_ids=ids).logits
    for bad in (torch.tensor([[0]]), torch.zeros(3, 1, dtype=torch.long), torch.arange(5)[None].repeat(2, 1)):
        with pytest.raises(ValueError, match=re.escape(f"position_ids of shape {tuple(bad.shape)} ") + r".*\(3, 5\)"):
            model(input_ids=ids, position_ids=bad)
    for good in (torch.arange(5), torch.arange(5)[None], torch.arange(5)[None].repeat(3, 1)):
        assert torch.equal(model(input_ids=ids, position_ids=good).logits, default)
    long = torch.randint(0, 7, (1, 20))
    model(input_ids=long, position_ids=(torch.arange(20) - 4).clamp(min=0)[None])


@pytest.mark.parametrize(
    "field,bad",
    [
        ("attention_scale", float("inf")),  # NaN logits
        ("attention_scale", float("nan")),
        ("layer_norm_eps", -1.0),  # NaN logits
        ("layer_norm_eps", float("inf")),  # finite logits, but every state zeroed
        ("layer_norm_eps", 0.0),  # NaN only on a constant state
    ],
)
def test_attention_scale_and_layer_norm_eps_set_on_a_built_backbone_are_checked_as_at_build(field, bad):
    """Both fields may change on a built backbone and the forward reads them at every call, but the check that
    refuses inf, NaN or a non-positive eps ran only when the config was built: set afterwards, the logits were NaN (or
    the states zeroed) without a word. Setting one is checked now as building with it is, and leaves it unchanged."""
    model = AutoModelForCausalLM.from_config(_config(variant="residual_layernorm"))
    ids = torch.randint(0, 7, (2, 5))
    before = model(input_ids=ids).logits
    old = getattr(model.config, field)
    with pytest.raises(ValueError, match=rf"{field} .* must be a .*finite number, got"):
        setattr(model.config, field, bad)
    assert getattr(model.config, field) == old
    assert torch.equal(model(input_ids=ids).logits, before)
    setattr(model.config, field, 0.5)
    assert getattr(model.config, field) == 0.5


def test_an_attention_mask_that_is_not_one_flag_per_token_is_refused():
    """A 4-d mask (transformers' custom-mask form), even all ones, ran through the forward's 2-d indexing into a
    mask of six dimensions and gave logits of shape (3, 3, 3, 5, 16) without a word (a loss then stopped in
    cross_entropy's batch-size mismatch); a (batch, 1) mask broadcast one flag over every token (zeros masked the
    whole row). Refused now, naming both shapes; (batch, n) and (1, n) masks run as before."""
    model = AutoModelForCausalLM.from_config(_config(variant="residual_layernorm"))
    ids = torch.randint(1, 7, (3, 5))
    default = model(input_ids=ids).logits
    for bad in (torch.ones(3, 1, 5, 5), torch.zeros(3, 1, dtype=torch.long), torch.ones(5, dtype=torch.long)):
        with pytest.raises(
            ValueError, match=re.escape(f"attention_mask of shape {tuple(bad.shape)} ") + r".*\(3, 5\)"
        ):
            model(input_ids=ids, attention_mask=bad, labels=ids)
    for good in (torch.ones(3, 5, dtype=torch.long), torch.ones(1, 5, dtype=torch.long)):
        assert torch.equal(model(input_ids=ids, attention_mask=good).logits, default)


@pytest.mark.parametrize(
    "field,value",
    [
        ("vocab_size", 20),
        ("hidden_size", 48),
        ("num_attention_heads", 3),
        ("readout_size", 5),
        ("intermediate_size", 9),
    ],
)
def test_a_shape_field_changed_after_building_is_refused_at_save(tmp_path, field, value):
    """config.vocab_size (or hidden_size, heads, readout_size, intermediate_size) set on a built backbone changed no
    tensor, but save_pretrained wrote it into config.json: the folder then failed to load ('ignore_mismatched_sizes
    ... raising an error'), found only when it was read back. Refused at save now, naming the field, its value and
    the size the model's tensors hold; resize_token_embeddings, which resizes the tensors too, still saves."""
    model = AutoModelForCausalLM.from_config(_config(variant="mlp"))
    held = getattr(model.config, field)
    setattr(model.config, field, value)
    with pytest.raises(ValueError, match=rf"config\.{field} is {value!r}, but the model holds {held!r} .*from_config"):
        model.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()
    setattr(model.config, field, held)
    model.resize_token_embeddings(9)
    model.save_pretrained(tmp_path)
    assert AutoModelForCausalLM.from_pretrained(tmp_path).get_input_embeddings().weight.shape[0] == 9


def test_a_tied_backbone_whose_config_says_untied_is_refused_at_save(tmp_path):
    """tie_word_embeddings set to False on a backbone built tied left lm_head and embed_tokens one matrix, which the
    save wrote once: the folder loaded untied with a freshly drawn lm_head, other logits than the model saved.
    Refused now; set back, the model saves and loads as it was."""
    model = AutoModelForCausalLM.from_config(_config(tie_word_embeddings=True))
    ids = torch.randint(0, 7, (2, 5))
    before = model(input_ids=ids).logits
    model.config.tie_word_embeddings = False
    with pytest.raises(ValueError, match=r"config\.tie_word_embeddings is False, but .* one matrix"):
        model.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()
    model.config.tie_word_embeddings = True
    model.save_pretrained(tmp_path)
    assert torch.equal(AutoModelForCausalLM.from_pretrained(tmp_path)(input_ids=ids).logits, before)


@pytest.mark.parametrize("weights", ["sparse", "random"])
@pytest.mark.parametrize("looped,index", [(False, 2), (False, -1), (True, 1)])
def test_fixed_block_weights_of_a_layer_the_backbone_does_not_have_are_refused(weights, looped, index):
    """fixed_block_weights(config, 5) of a 2-layer sparse backbone returned all-zero weights, and of a random one a
    draw no layer holds, without a word; index -1 stopped in a bare IndexError. Refused now, naming the index and
    the layer modules the config has."""
    config = _config(weights=weights, looped=looped, num_attention_heads=1, hidden_size=64)
    with pytest.raises(ValueError, match=rf"layer module {index}, but .* {config.num_layer_modules} "):
        fixed_block_weights(config, index)
