import pytest
import torch
from transformers import AutoModelForCausalLM

from ut_peft.universal import UniversalTransformerConfig
from ut_peft.universal.compiler import (
    CompilationError,
    compile_embedding,
    compile_into_model,
    fit_embedding,
    required_width,
)
from ut_peft.universal.targets import TargetTransformer

CASES = [(1, 2, 2), (2, 3, 2), (3, 4, 3), (2, 5, 1)]  # (L, d, k)


def _backbone(*, width, layers, heads=1, head_dim, weights, looped=False, readout, seed=0, **kwargs):
    config = UniversalTransformerConfig(
        hidden_size=width,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        head_dim=head_dim,
        weights=weights,
        looped=looped,
        readout_size=readout,
        seed=seed,
        **kwargs,
    )
    return AutoModelForCausalLM.from_config(config)


def _max_error(backbone, target, embedding, dtype, seed=0):
    x = torch.randn(5, 9, target.width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    backbone = backbone.to(dtype)
    simulated = backbone.simulate(x.to(dtype), embedding.to(dtype)).double()
    return (simulated - target(x)).abs().max().item()


@pytest.mark.parametrize("weights", ["sparse", "random"])
@pytest.mark.parametrize("looped", [False, True])
@pytest.mark.parametrize("layers,d,k", CASES)
def test_single_head_compilation_is_exact(weights, looped, layers, d, k):
    target = TargetTransformer.random(d=d, k=k, layers=layers, seed=layers * 10 + d)
    width = required_width(layers, 1, k, d)
    backbone = _backbone(width=width, layers=layers, head_dim=k, weights=weights, looped=looped, readout=d, seed=3)
    result = compile_embedding(target, backbone)
    assert result.full_rank and result.num_constraints == 2 * layers * k + d and result.residual < 1e-10
    assert _max_error(backbone, target, result.embedding, torch.float64) < 1e-9
    if weights == "random":
        # At exactly the minimum width a Gaussian system is square and its condition number grows with depth
        # (E reaches ~1e2 for L=3), which float32 amplifies; two spare columns make the min-norm E well behaved.
        backbone = _backbone(
            width=width + 2, layers=layers, head_dim=k, weights=weights, looped=looped, readout=d, seed=3
        )
        result = compile_embedding(target, backbone)
    assert _max_error(backbone, target, result.embedding, torch.float32) < 1e-5


def test_wider_backbone_and_wider_heads_still_compile():
    target = TargetTransformer.random(d=3, k=2, layers=2, seed=7)
    backbone = _backbone(width=30, layers=2, head_dim=4, weights="random", readout=3)
    result = compile_embedding(target, backbone)
    assert _max_error(backbone, target, result.embedding, torch.float64) < 1e-9


@pytest.mark.parametrize("weights", ["sparse", "random"])
def test_multi_head_attention_matching(weights):
    target = TargetTransformer.random(d=2, k=2, layers=2, heads=2, seed=4)
    width = required_width(2, 2, 2, 2)
    assert width == 2 * 2 * (2 + 4) + 4 * 2  # the width grows with the H^L head paths
    backbone = _backbone(width=width, layers=2, heads=2, head_dim=2, weights=weights, readout=2)
    result = compile_embedding(target, backbone)
    assert result.num_paths == 4
    assert _max_error(backbone, target, result.embedding, torch.float64) < 1e-9
    # float32 rounding grows with the size of E: at exactly the required width Phi is square and badly conditioned
    # for random weights (max |E| about 70 here, against 1.5 for the sparse layout), so the bound scales with E.
    tolerance = 1e-6 * max(1.0, result.embedding.abs().max().item())
    assert _max_error(backbone, target, result.embedding, torch.float32) < tolerance


@pytest.mark.parametrize("weights", ["sparse", "random"])
def test_too_narrow_backbone_is_refused(weights):
    target = TargetTransformer.random(d=3, k=2, layers=2, seed=1)
    width = required_width(2, 1, 2, 3)
    backbone = _backbone(width=width - 1, layers=2, head_dim=2, weights=weights, readout=3)
    with pytest.raises(CompilationError, match="too narrow") as info:
        compile_embedding(target, backbone)
    assert info.value.result.residual > 1e-6  # the best E really does not simulate this target
    loose = compile_embedding(target, backbone, strict=False)
    assert _max_error(backbone, target, loose.embedding, torch.float64) > 1e-6


def test_rank_deficient_backbone_is_refused():
    # Wide enough, but a random backbone whose values are all zero after layer 1 cannot carry layer-2 blocks.
    target = TargetTransformer.random(d=2, k=1, layers=2, seed=1)
    backbone = _backbone(width=12, layers=2, head_dim=1, weights="random", readout=2)
    with torch.no_grad():
        backbone.model.layers[0].value.zero_()
    with pytest.raises(CompilationError, match="rank-deficient"):
        compile_embedding(target, backbone)


def test_incompatible_backbones_are_refused_with_reason():
    target = TargetTransformer.random(d=2, k=2, layers=2, seed=0)
    with pytest.raises(CompilationError, match="attention_only"):
        compile_embedding(
            target,
            _backbone(width=20, layers=2, head_dim=2, weights="sparse", readout=2, variant="residual_layernorm"),
        )
    with pytest.raises(CompilationError, match="layers differ"):
        compile_embedding(target, _backbone(width=20, layers=3, head_dim=2, weights="sparse", readout=2))
    with pytest.raises(CompilationError, match="readout_size"):
        compile_embedding(target, _backbone(width=20, layers=2, head_dim=2, weights="sparse", readout=3))


def test_token_level_compilation_into_the_hf_model():
    vocab = 6
    target = TargetTransformer.random(d=3, k=2, layers=2, d_out=vocab, vocab_size=vocab, seed=2)
    backbone = _backbone(
        width=required_width(2, 1, 2, vocab), layers=2, head_dim=2, weights="random", readout=vocab, vocab_size=vocab
    ).to(torch.float64)
    compile_into_model(target, backbone)
    ids = torch.randint(0, vocab, (4, 8))
    assert (backbone(input_ids=ids).logits - target(ids)).abs().max() < 1e-9


def test_a_tied_backbone_is_refused_before_its_compiled_e_is_overwritten():
    vocab = 6
    target = TargetTransformer.random(d=3, k=2, layers=2, d_out=vocab, vocab_size=vocab, seed=2)
    backbone = _backbone(
        width=required_width(2, 1, 2, vocab),
        layers=2,
        head_dim=2,
        weights="sparse",
        readout=vocab,
        vocab_size=vocab,
        tie_word_embeddings=True,
    )
    before = backbone.get_input_embeddings().weight.detach().clone()
    with pytest.raises(ValueError, match="tie_word_embeddings=False"):
        compile_into_model(target, backbone)
    assert torch.equal(backbone.get_input_embeddings().weight, before)


def test_gradient_fit_improves_with_width():
    target = TargetTransformer.random(d=2, k=2, layers=2, heads=2, seed=5, dtype=torch.float32)
    errors = []
    for width in (2, 40):
        backbone = _backbone(width=width, layers=2, heads=2, head_dim=2, weights="random", readout=2, seed=1)
        errors.append(fit_embedding(target, backbone, steps=80, seq_len=6, seed=0).error)
    assert errors[1] < errors[0]


def test_compilation_is_exact_and_the_same_at_any_init_scale():
    # The init scale of E and the positions is a training setting: the compiler writes E itself and reads only the
    # fixed weights, so the new default (0.02) and the old unit scale compile to the same exact E.
    target = TargetTransformer.random(d=4, k=2, layers=2, seed=5)
    width = required_width(2, 1, 2, 4)
    embeddings = []
    for scale in (0.02, 1.0):
        for weights in ("sparse", "random"):
            config = UniversalTransformerConfig(
                vocab_size=8, hidden_size=width, num_hidden_layers=2, head_dim=2, weights=weights, readout_size=4,
                seed=3, initializer_range=scale,
            )  # fmt: skip
            backbone = AutoModelForCausalLM.from_config(config)
            result = compile_embedding(target, backbone)
            assert _max_error(backbone, target, result.embedding, torch.float64) < 1e-9
            embeddings.append(result.embedding)
    assert torch.equal(embeddings[0], embeddings[2]) and torch.equal(embeddings[1], embeddings[3])


@pytest.mark.parametrize(
    "weights, layers, heads, looped",
    [("sparse", 2, 1, False), ("sparse", 3, 1, True), ("sparse", 2, 2, False), ("random", 2, 2, True)],
)
def test_a_compiled_program_runs_every_short_input_and_ignores_right_padding(weights, layers, heads, looped):
    """Already right (no fix): the token-level program on every sequence of 1 to 4 tokens over 3, and the same
    sequences right-padded to 6 in one batch with their attention mask (as the task evaluation feeds them)."""
    import itertools

    vocab = 3
    target = TargetTransformer.random(d=3, k=2, layers=layers, heads=heads, d_out=vocab, vocab_size=vocab, seed=1)
    width = required_width(layers, heads, 2, vocab)
    backbone = _backbone(
        width=width, layers=layers, heads=heads, head_dim=2, weights=weights, looped=looped, readout=vocab,
        vocab_size=vocab, seed=3,
    ).to(torch.float64)  # fmt: skip
    compile_into_model(target, backbone)
    for n in range(1, 5):
        ids = torch.tensor(list(itertools.product(range(vocab), repeat=n)))
        expected = target(ids)
        padded = torch.nn.functional.pad(ids, (0, 6 - n))
        mask = torch.nn.functional.pad(torch.ones_like(ids), (0, 6 - n))
        with torch.no_grad():
            assert (backbone(input_ids=ids).logits - expected).abs().max() < 1e-9
            assert (backbone(input_ids=padded, attention_mask=mask).logits[:, :n] - expected).abs().max() < 1e-9


def test_the_sparse_single_head_program_is_the_documented_layout():
    """docs/universal.md gives the one-head sparse E as [c M_0 Q_1 | M_0 K_1 | ... | c M_{L-1} Q_L | M_{L-1} K_L |
    M_L W_out] with c = s_T / s_UT (it said M_l Q / c): a backbone head wider than the target's makes c = sqrt(2) here,
    and every slot is checked, zero padding included."""
    layers, d, k, backbone_k = 2, 3, 2, 4
    target = TargetTransformer.random(d=d, k=k, layers=layers, seed=6)
    backbone = _backbone(
        width=required_width(layers, 1, backbone_k, d), layers=layers, head_dim=backbone_k, weights="sparse", readout=d
    )
    embedding = compile_embedding(target, backbone).embedding
    c = target.scale / backbone.config.attention_scale
    assert c == pytest.approx(2**0.5)
    pad = lambda x: torch.nn.functional.pad(x, (0, backbone_k - k))  # noqa: E731
    path = torch.eye(d, dtype=torch.float64)  # M_0
    slots = []
    for layer in range(layers):
        slots += [pad(c * path @ target.query[layer, 0]), pad(path @ target.key[layer, 0])]
        path = path @ target.value[layer, 0]
    slots.append(path @ target.out)
    assert torch.allclose(embedding, torch.cat(slots, dim=1).detach(), atol=1e-12)


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize(
    "where,bad",
    [("out", float("inf")), ("value", float("nan")), ("query", float("inf")), ("token_embedding", float("nan"))],
)
def test_a_target_with_a_weight_that_is_not_finite_is_refused_naming_it(where, bad, strict):
    """A target holding inf in W_out compiled under strict=True into an E of NaNs: its residual was NaN, and NaN > tol
    is False, so the check passed; NaN elsewhere stopped in LAPACK's 'false INTERNAL ASSERT FAILED'. Refused now,
    strict or not, naming the tensor, since no E simulates such a target."""
    vocab = 4
    target = TargetTransformer.random(d=3, k=2, layers=2, d_out=vocab, vocab_size=vocab, seed=0)
    with torch.no_grad():
        getattr(target, where)[(0,) * getattr(target, where).dim()] = bad
    backbone = _backbone(
        width=required_width(2, 1, 2, vocab), layers=2, head_dim=2, weights="random", readout=vocab, vocab_size=vocab
    )
    with pytest.raises(CompilationError, match=f"target's {where} holds 1 value that is not finite"):
        compile_embedding(target, backbone, strict=strict)
    with pytest.raises(CompilationError, match=f"target's {where} holds"):
        compile_into_model(target, backbone, strict=strict)


@pytest.mark.parametrize("scale", [float("inf"), float("nan")])
def test_a_target_scale_that_is_not_finite_is_refused(scale):
    base = TargetTransformer.random(d=3, k=2, layers=1, seed=0)
    target = TargetTransformer(base.query.data, base.key.data, base.value.data, base.out.data, scale=scale)
    backbone = _backbone(width=required_width(1, 1, 2, 3), layers=1, head_dim=2, weights="random", readout=3)
    with pytest.raises(CompilationError, match="target's softmax scale"):
        compile_embedding(target, backbone)


def test_a_backbone_whose_attention_scale_is_zero_is_refused_with_a_reason():
    """c = s_target / s_backbone was a bare ZeroDivisionError; a backbone whose attention is uniform at every layer
    attends like no target of nonzero scale."""
    target = TargetTransformer.random(d=3, k=2, layers=1, seed=0)
    backbone = _backbone(
        width=required_width(1, 1, 2, 3), layers=1, head_dim=2, weights="random", readout=3, attention_scale=0.0
    )
    with pytest.raises(CompilationError, match="attention_scale=0"):
        compile_embedding(target, backbone)


def test_a_backbone_whose_fixed_weights_are_not_finite_is_refused():
    target = TargetTransformer.random(d=3, k=2, layers=2, seed=0)
    backbone = _backbone(width=required_width(2, 1, 2, 3), layers=2, head_dim=2, weights="random", readout=3)
    with torch.no_grad():
        backbone.model.layers[1].value[0, 0, 0] = float("inf")
    with pytest.raises(CompilationError, match=r"backbone's model\.layers\.1\.value holds 1 value that is not finite"):
        compile_embedding(target, backbone)


def test_a_target_that_is_not_a_target_transformer_is_refused_saying_what_is_supported():
    """A transformers model given as the target (MLPs, LayerNorm, biases, positions: outside the construction's class)
    stopped in a bare AttributeError ('... has no attribute query'); it is a TypeError naming the supported class."""
    from transformers import GPT2Config, GPT2LMHeadModel

    target = GPT2LMHeadModel(GPT2Config(n_embd=8, n_layer=2, n_head=1, vocab_size=5, n_positions=8))
    backbone = _backbone(width=40, layers=2, head_dim=8, weights="random", readout=5, vocab_size=5)
    for call in (compile_embedding, compile_into_model, fit_embedding):
        with pytest.raises(TypeError, match="target must be a TargetTransformer .*GPT2LMHeadModel"):
            call(target, backbone)


def _small_backbone(**kwargs):
    return _backbone(width=40, layers=2, head_dim=2, weights="random", readout=3, vocab_size=5, **kwargs)


@pytest.mark.parametrize(
    "built,field,value,target_kwargs",
    [
        # was an E reported exact (residual 7e-16) for one layer of a backbone built with and running two
        ({}, "num_hidden_layers", 1, {"layers": 1}),
        ({}, "looped", True, {}),  # was exact for layer 0 looped, which this backbone is not
        ({"attention_scale": 0.5}, "head_dim", 3, {}),  # was a bare lstsq 'input.size(-2) should match'
        ({}, "readout_size", 4, {"d_out": 4}),  # the same
        ({}, "hidden_size", 50, {}),  # was a bare 'mat1 and mat2 shapes cannot be multiplied'
        ({}, "num_attention_heads", 2, {"heads": 2}),
    ],
)
def test_a_backbone_config_changed_after_building_is_refused_naming_the_field(built, field, value, target_kwargs):
    """The compiler read L, looping, H, k, m and d_out from the backbone's config, but its layers, readout and
    forward are the ones it was built with. Edited after building, the config gave either an E reported exact for a
    model the backbone is not (whose forward then refuses the config), or a bare shape error from the solve.
    compile_embedding, compile_into_model and fit_embedding now refuse it naming the field and both values."""
    backbone = _small_backbone(**built)
    target = TargetTransformer.random(**{"d": 3, "k": 2, "layers": 2, "d_out": 3, **target_kwargs})
    old = getattr(backbone.config, field)
    setattr(backbone.config, field, value)
    for call in (compile_embedding, fit_embedding):
        with pytest.raises(ValueError, match=rf"config\.{field} is {value!r}, but .* built with {field}={old!r}"):
            call(target, backbone)
    setattr(backbone.config, field, old)
    if not target_kwargs:
        assert compile_embedding(target, backbone).residual < 1e-8


def test_a_vocab_size_changed_after_building_is_refused_by_compile_into_model():
    """vocab_size 5 -> 6 on a built backbone moved the derived readout_size to 6 too, and a 6-token target then
    stopped in a bare lstsq shape error; refused now, naming the readout the backbone holds."""
    backbone = _backbone(width=40, layers=2, head_dim=2, weights="random", readout=None, vocab_size=5)
    backbone.config.vocab_size = 6
    target = TargetTransformer.random(d=3, k=2, layers=2, d_out=6, vocab_size=6)
    with pytest.raises(ValueError, match=r"config\.readout_size is 6, but .* readout_size=5 .*vocab_size"):
        compile_into_model(target, backbone)


@pytest.mark.parametrize("ids", [[[0, -1, 2]], [[0, 5, 2]]])
def test_target_token_ids_outside_its_table_are_refused(ids):
    """A target took token id -1 without a word (Python indexing read the last row), while the backbone's
    nn.Embedding refuses it, so the two models compared on such ids differed silently; 5 in a 5-row table was a bare
    IndexError. Both are a ValueError naming the id and the table's rows."""
    target = TargetTransformer.random(d=3, k=2, layers=1, vocab_size=5)
    with pytest.raises(ValueError, match=rf"token ids .*{ids[0][1]}.* 0 \.\. 4"):
        target(torch.tensor(ids))
    assert target(torch.tensor([[0, 4, 2]])).shape == (1, 3, 3)


def test_target_inputs_of_two_dimensions_that_are_not_token_ids_are_refused():
    """A (n, d) float input without its batch dimension was read as token ids: a bare IndexError ('tensors used as
    indices must be long'), or with a bool tensor a boolean mask over the table's rows."""
    target = TargetTransformer.random(d=3, k=2, layers=1, vocab_size=5)
    for bad in (torch.randn(4, 3), torch.ones(5, 3, dtype=torch.bool)):
        with pytest.raises(ValueError, match=r"integer token ids of shape \(batch, n\)"):
            target(bad)


@pytest.mark.parametrize("name", ["batch_size", "seq_len"])
def test_fit_embedding_refuses_an_empty_batch(name):
    """seq_len=0 (or batch_size=0) fitted on empty batches and returned error=nan without a word."""
    target = TargetTransformer.random(d=3, k=2, layers=2)
    with pytest.raises(ValueError, match=rf"{name} must be a positive int, got 0"):
        fit_embedding(target, _small_backbone(), steps=2, **{name: 0})


def _weights():
    base = TargetTransformer.random(d=3, k=2, layers=1)
    return [base.query.data, base.key.data, base.value.data, base.out.data]


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda w: [x[:0] for x in w[:3]] + w[3:], r"at least one layer, head"),  # L = 0: accepted, computing X W_out
        (lambda w: [w[0], w[1], w[2], w[3][:, :0]], r"at least one layer, head"),  # d_out = 0: an empty output
        (lambda w: [w[0].float(), *w[1:]], r"one floating-point dtype, got query torch.float32, key torch.float64"),
        (lambda w: [x.long() for x in w], r"one floating-point dtype"),  # was a bare 'can require gradients'
    ],
)
def test_a_target_of_empty_or_mixed_weights_is_refused(change, message):
    """A target of zero layers or an empty output was built and ran without a word (X W_out, or outputs of width 0);
    weights of two dtypes were built and stopped at the first forward in 'expected scalar type Float but found
    Double'. All are refused when the target is built."""
    with pytest.raises(ValueError, match=message):
        TargetTransformer(*change(_weights()))


@pytest.mark.parametrize("scale", [True, "0.5"])
def test_a_target_scale_that_is_not_a_number_is_refused(scale):
    """scale=True built a target of temperature 1.0 (and '0.5' one of 0.5) without a word."""
    with pytest.raises(ValueError, match=r"scale must be a real number"):
        TargetTransformer(*_weights(), scale=scale)
    assert TargetTransformer(*_weights(), scale=0.5).scale == 0.5


@pytest.mark.parametrize("args", [(2, 0, 2, 3), (-1, 1, 2, 3), (2, 1, 0, 3), (2, 1, 2, 1.5)])
def test_required_width_refuses_sizes_that_are_not_positive_ints(args):
    """required_width(2, 0, 2, 3) answered 0 and required_width(-1, 1, 2, 3) 3.0, widths of no construction."""
    with pytest.raises(ValueError, match=r"must be a positive int"):
        required_width(*args)


def test_a_backbone_with_learned_positions_whose_config_says_none_is_refused():
    """position_embedding_type set to 'none' on a backbone built with a learned table passed the compiler's check of
    the config, and the E it solved (residual 1e-15) missed the target by 0.05 in the forward, which still adds the
    table. Refused now, naming the field and the built value."""
    backbone = _small_backbone(position_embedding_type="learned")
    backbone.config.position_embedding_type = "none"
    target = TargetTransformer.random(d=3, k=2, layers=2, d_out=3)
    for call in (compile_embedding, fit_embedding):
        with pytest.raises(ValueError, match=r"config\.position_embedding_type is 'none', but .*='learned'"):
            call(target, backbone)
