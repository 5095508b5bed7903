"""One line that says what to do when a model cannot be had: a model folder saved without its tokenizer, a Hub id
that is not cached while offline (``hf download``, the current huggingface_hub command), and no network."""

import pytest
import torch

from ut_peft.accessibility.testing import crammable_model
from ut_peft.cli import cram
from ut_peft.cli.common import check_model, run
from ut_peft.models import load_model, load_tokenizer

torch.set_num_threads(1)

UNCACHED = "ut-peft-tests/no-such-model"


@pytest.fixture(scope="module")
def bare_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bare")  # weights and config.json, no tokenizer
    crammable_model("llama").save_pretrained(folder)
    return folder


def test_a_model_folder_without_a_tokenizer_says_so_and_what_to_do(bare_model, tmp_path, capsys, monkeypatch):
    with pytest.raises(ValueError) as caught:
        load_tokenizer(str(bare_model))
    message = str(caught.value)
    assert f"the model folder {bare_model} has no tokenizer" in message and "--source tokens" in message
    assert "sentencepiece" not in message and "tiktoken" not in message  # transformers' misleading advice
    monkeypatch.delenv("UT_PEFT_DEBUG", raising=False)
    argv = ["--model", str(bare_model), "--source", "words", "--ms", "1", "--lengths", "2", "--num-sequences", "1"]
    with pytest.raises(SystemExit):
        run(cram.main, cram.parse, argv + ["--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert "has no tokenizer" in err[-1] and "save the model's tokenizer into it" in err[-1]
    assert not any("Traceback" in line for line in err)


def test_an_uncached_hub_id_while_offline_says_hf_download(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as tests/conftest.py sets it for huggingface_hub at import
    with pytest.raises(ValueError) as caught:
        check_model(UNCACHED)
    message = str(caught.value)
    assert "the Hub is offline (HF_HUB_OFFLINE is set)" in message
    assert f"`hf download {UNCACHED}`" in message and "huggingface-cli" not in message
    for load in (load_model, load_tokenizer):  # the library says the same, not transformers' link to its docs
        with pytest.raises(OSError) as caught:
            load(UNCACHED)
        assert str(caught.value).startswith(
            f"{UNCACHED} is not in the local Hugging Face cache and the Hub is offline"
        )
        assert f"`hf download {UNCACHED}`" in str(caught.value)


class ConnectError(Exception):
    """What the HTTP library under huggingface_hub raises without a network (httpx's, not an OSError)."""


def test_no_network_is_one_line_not_the_http_librarys_error(monkeypatch, capsys, tmp_path):
    import huggingface_hub

    def model_info(self, repo_id, **kwargs):
        raise ConnectError("[Errno -2] Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("UT_PEFT_DEBUG", raising=False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    with pytest.raises(SystemExit) as exit_:
        run(cram.main, cram.parse, ["--model", UNCACHED, "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert f"--model {UNCACHED} is not in the local Hugging Face cache and the Hub cannot be reached" in line
    assert "(ConnectError: [Errno -2] Name or service not known; check the network" in line
    assert f"`hf download {UNCACHED}`" in line and "rerun with --debug" not in line
