import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def load_benchmark(monkeypatch):
    """Import a script of benchmarks/ as a module (registered in sys.modules for the test's duration, as its
    dataclasses need), so a test calls its functions: ``load_benchmark("run_pace.py")``. benchmarks/ goes on the
    path first, as ``python benchmarks/x.py`` puts it there, for a script's ``import harness``."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))

    def load(script: str):
        name = "benchmark_" + script.removesuffix(".py")
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / script)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        return module

    return load


def tiny_tokenizer():
    """A byte-level BPE of 300 tokens trained in well under a second on the text source's own text, with a BOS."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator([topics[k] for k in sorted(topics)[:20]], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="session")
def tiny_model_folder(tmp_path_factory):
    """A tied two-layer Llama (hidden 32) with random weights and a 300-token tokenizer, saved as a model folder."""
    from ut_peft.testing import tiny_model

    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = tiny_tokenizer()
    tiny_model("llama", tied=True, vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
