"""Under ut-peft's protocol AdamW's step is the same size relative to the memory vectors on every model.

Gemma multiplies its token embeddings by sqrt(d) inside the embedding module, and ut-peft's init follows that scale
(std 1.03 on Gemma-3-270M, against 0.041 for the table itself). AdamW's step is absolute (about lr per coordinate), so
with lr 1e-2 a Gemma row moved sqrt(d) times more slowly relative to its vectors than a row of a model without the
scale, and crammed far less within its cap: tiny Gemma-3 0 of 32 rows of 2 to 6 tokens at cap 60 where a tiny Llama of
the same size crammed 13; Gemma-3-270M 3 of 8 rows of 9 random-word tokens at cap 300 where the same rows with the
lr scaled crammed 8 of 8. The published protocol keeps its absolute lr (its init is the unscaled table's).
"""

import pytest
import torch

from ut_peft.accessibility.config import SweepConfig
from ut_peft.accessibility.engine.cram import cram, cram_reference
from ut_peft.accessibility.engine.forward import init_std, init_vectors
from ut_peft.accessibility.engine.jobs import CramConfig, CramJob
from ut_peft.accessibility.engine.protocol import cram_settings
from ut_peft.cli.cram import FLAGS


def _first_update(model, config, engine=cram):
    """The median absolute change of a row's coordinates over its first AdamW update (about lr: Adam's first step is
    lr * g / |g| in every coordinate), and the row's result."""
    job = CramJob(key=0, ids=[5, 17, 42], m=1, seed=3)
    results = list(engine(model, [job], config)) if engine is cram else [engine(model, job, config)]
    (result,) = results
    assert result.steps == 1
    start = init_vectors(1, model.get_input_embeddings().weight.shape[1], init_std(model, config), job.seed)
    return float((result.vectors - start).abs().median()), result


@pytest.mark.parametrize("engine", [cram, cram_reference])
@pytest.mark.parametrize("family, embedding_scale", [("llama", 1.0), ("gemma3", 8.0)])
def test_ut_peft_step_is_lr_times_the_embedding_scale(crammable, family, embedding_scale, engine):
    """Tiny Gemma-3 (d = 64) scales its embeddings by 8: its vectors are drawn 8x larger and step 8x further."""
    model = crammable(family)
    step, _ = _first_update(model, CramConfig(max_steps=1, patience=1), engine)
    assert step == pytest.approx(1e-2 * embedding_scale, rel=0.02)


def test_published_step_stays_the_absolute_lr_on_gemma(crammable):
    """The published loop's step is lr whatever the model (its init is the unscaled table's); its cap of 2 forwards
    applies one update."""
    step, _ = _first_update(crammable("gemma3"), cram_settings("published", CramConfig(max_steps=2, patience=2)))
    assert step == pytest.approx(1e-2, rel=0.02)


def test_tiny_gemma_crams_short_rows_under_ut_peft_defaults(crammable):
    """The symptom: under ut-peft's defaults a tiny Gemma-3 crammed none of these 8 rows of 2 tokens in 60 steps (a
    tiny Llama of the same size crams all 8), its vectors moving 1/80 of their std a step."""
    gemma = crammable("gemma3")
    generator = torch.Generator().manual_seed(123)
    jobs = [
        CramJob(key=i, ids=torch.randint(3, 97, (2,), generator=generator).tolist(), m=1, seed=i) for i in range(8)
    ]
    config = CramConfig(max_steps=60, patience=60, prefix_ids=(gemma.config.bos_token_id,))
    crammed = sum(result.accessible for result in cram(gemma, jobs, config))
    assert crammed >= 6


@pytest.mark.parametrize("family, recorded", [("llama", None), ("gemma3", "embedding")])
def test_a_sweep_records_the_step_scale_only_where_it_changes_the_rows(crammable, family, recorded):
    """Resolved against the model as run_sweep does: recorded on Gemma, left out (as "none", what folders written
    before it mean) where the model has no embedding scale, so that those folders still resume there."""
    config = SweepConfig(model="tiny", source="tokens")
    config.resolve_lr_scale(crammable(family))
    assert config.fingerprint({"kind": "tokens"})["cram"].get("lr_scale") == recorded


def test_settings_without_the_step_scale_mean_the_lr_as_given():
    """A folder written before lr_scale existed stepped with the lr as given: rebuilt (re-crams, reports) and rerun
    from its settings.json (the command's flags), it still does."""
    settings = {"model": "gemma-3-270m", "ms": [1], "num_sequences": 2, "seed": 0, "grid": {}, "cram": {"lr": 0.01}}
    assert SweepConfig.from_settings(settings).cram.lr_scale == "none"
    (flag,) = [flag for flag in FLAGS if flag.name == "lr-scale"]
    assert flag.recorded(settings, "settings.json") == "none"
    assert flag.recorded({**settings, "cram": {"lr_scale": "embedding"}}, "settings.json") == "embedding"
