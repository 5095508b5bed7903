"""The tuner's warnings name the user's line (warnings.warn's filename and lineno), not a line inside peft or ut-peft,
however deep in peft's loading the warning is raised: a filter by module, and the printed location, name the call
the user made."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from peft import PeftModel, get_peft_model

from ut_peft import UTReprogramConfig
from ut_peft.testing import tiny_config, tiny_model, trained_adapter


def test_loading_onto_another_base_with_check_base_false_warns_at_the_callers_line(tmp_path):
    trained_adapter(tiny_model("llama")).save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="^check_base=False: loading this adapter onto another base") as record:
        PeftModel.from_pretrained(tiny_model("llama", seed=5), tmp_path, check_base=False)
    assert {warning.filename for warning in record if "check_base=False" in str(warning.message)} == {__file__}


def test_a_base_without_a_recorded_seed_warns_at_the_callers_line():
    torch.manual_seed(3)
    base = transformers.AutoModelForCausalLM.from_config(tiny_config("llama"))
    with pytest.warns(UserWarning, match="without a recorded seed") as record:
        get_peft_model(base, UTReprogramConfig())
    assert {warning.filename for warning in record if "recorded seed" in str(warning.message)} == {__file__}


def test_a_digest_that_cannot_be_compared_warns_at_the_callers_line(tmp_path):
    trained_adapter(tiny_model("llama")).save_pretrained(tmp_path)
    path = tmp_path / "adapter_config.json"
    saved = json.loads(path.read_text())
    saved["base_weights_digest"] = "another-scheme:0123"
    path.write_text(json.dumps(saved))
    with pytest.warns(UserWarning, match="cannot compare this base's frozen weights") as record:
        PeftModel.from_pretrained(tiny_model("llama"), tmp_path)
    assert {warning.filename for warning in record if "cannot compare" in str(warning.message)} == {__file__}
