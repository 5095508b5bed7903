"""The one rule that picks the adapter that takes over from a deleted active one, for a ``PeftModel``
(``UTReprogramModel.delete_adapter``) and for transformers' ``delete_adapter`` alike; the flows through both are in
test_peft_flows.py and test_transformers_adapter_api.py."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
from peft import get_peft_model

from ut_peft import UTReprogramConfig, random_backbone
from ut_peft.testing import tiny_config
from ut_peft.tuners.ut_reprogram.integration import successor_after_deleting


def configs(**inference_mode: bool) -> dict[str, SimpleNamespace]:
    return {name: SimpleNamespace(inference_mode=frozen) for name, frozen in inference_mode.items()}


def test_an_inactive_adapter_deleted_leaves_the_active_ones():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert successor_after_deleting(["b"], ["a"], configs(a=False)) is None


def test_the_other_active_adapters_take_over_and_are_frozen_only_if_all_were_loaded_frozen():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the successor was active already
        assert successor_after_deleting(["a"], ["a", "c", "b"], configs(b=True, c=True, d=False)) == (["c", "b"], True)
        assert successor_after_deleting(["a"], ["a", "c", "b"], configs(b=True, c=False)) == (["c", "b"], False)


def test_else_the_first_remaining_adapter_in_sorted_order_with_peft_s_warning():
    with pytest.warns(
        UserWarning, match=r"^Adapter a was active which is now deleted\. Setting active adapter to b\.$"
    ):
        assert successor_after_deleting(["a"], ["a"], configs(c=False, b=True)) == (["b"], True)
    with pytest.warns(UserWarning, match="Setting active adapter to b"):
        assert successor_after_deleting(["a"], ["a"], configs(c=True, b=False)) == (["b"], False)


def test_with_none_left_none_is_active():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert successor_after_deleting(["a"], ["a"], {}) == ([], False)


def test_the_warning_names_the_deleted_adapter_that_was_active(monkeypatch):
    """transformers' delete_adapter takes several names: the warning named the first of them, which need not be the
    active one."""
    import transformers.integrations.peft as transformers_peft

    monkeypatch.setattr(transformers_peft, "check_peft_version", lambda *args, **kwargs: None)
    model = random_backbone(tiny_config("llama"), seed=0)
    for name in ("a", "b", "c"):
        model.add_adapter(UTReprogramConfig(), adapter_name=name)
    model.set_adapter("b")
    with pytest.warns(UserWarning, match="^Adapter b was active which is now deleted. Setting active adapter to c"):
        model.delete_adapter(["a", "b"])
    assert model.active_adapters() == ["c"]
    peft_model = get_peft_model(random_backbone(tiny_config("llama"), seed=0), UTReprogramConfig(), adapter_name="b")
    peft_model.add_adapter("c", UTReprogramConfig())
    with pytest.warns(UserWarning, match="^Adapter b was active which is now deleted. Setting active adapter to c"):
        peft_model.delete_adapter("b")
    assert peft_model.active_adapters == ["c"]
    trains = sorted(name for name, param in peft_model.named_parameters() if param.requires_grad)
    assert trains and all(name.endswith(".c") for name in trains)  # c was added trainable: it trains


def test_the_warning_points_at_the_user_s_delete_adapter_call(monkeypatch):
    """Was wrong: the warning's stacklevel counted a fixed number of frames, which for PeftModel.delete_adapter ended
    inside peft (peft_model.py), so a filter by module or the printed location named peft, not the caller. It now
    names the first frame outside peft, transformers and ut_peft: this file, for both delete_adapter methods."""
    import transformers.integrations.peft as transformers_peft

    monkeypatch.setattr(transformers_peft, "check_peft_version", lambda *args, **kwargs: None)
    peft_model = get_peft_model(random_backbone(tiny_config("llama"), seed=0), UTReprogramConfig(), adapter_name="b")
    peft_model.add_adapter("c", UTReprogramConfig())
    with pytest.warns(UserWarning, match="^Adapter b was active which is now deleted") as record:
        peft_model.delete_adapter("b")
    assert [warning.filename for warning in record] == [__file__]
    model = random_backbone(tiny_config("llama"), seed=0)
    for name in ("a", "b"):
        model.add_adapter(UTReprogramConfig(), adapter_name=name)
    model.set_adapter("a")
    with pytest.warns(UserWarning, match="^Adapter a was active which is now deleted") as record:
        model.delete_adapter("a")
    assert [warning.filename for warning in record] == [__file__]
