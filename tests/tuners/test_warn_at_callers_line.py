"""warn_at_callers_line has two ways to find the user's line: warnings.warn's ``skip_file_prefixes`` (Python 3.12 and
later) and a walk of the frames (before). Both must name the same line, whichever Python runs the tests: here
(3.11) the 3.12 way runs through ``warnings.warn`` with CPython 3.12's rule for ``skip_file_prefixes`` in its place
(only the tuner module's view of ``warnings`` is changed, not ``sys.version_info`` nor the warnings module)."""

from __future__ import annotations

import functools
import os
import sys
import types
import warnings

import pytest
import torch
import transformers
from peft import get_peft_model

from ut_peft import UTReprogramConfig
from ut_peft.testing import tiny_config
from ut_peft.tuners.ut_reprogram import integration


def warn_as_python_312(message, category=None, stacklevel=1, source=None, *, skip_file_prefixes=(), calls=None):
    """CPython 3.12's ``warnings.warn`` location rule (Lib/warnings.py): with ``skip_file_prefixes``, ``stacklevel``
    is at least 2, and each level goes one frame back from ``warn``'s caller, past every frame whose file name starts
    with one of the prefixes. ``calls`` collects the ``skip_file_prefixes`` of each call."""
    if calls is not None:
        calls.append(skip_file_prefixes)
    if not (isinstance(skip_file_prefixes, tuple) and all(isinstance(p, str) for p in skip_file_prefixes)):
        raise TypeError("skip_file_prefixes must be a tuple of strs")
    if skip_file_prefixes:
        stacklevel = max(2, stacklevel)
    frame = sys._getframe(1)
    for _ in range(stacklevel - 1):
        frame = frame.f_back
        while frame is not None and frame.f_code.co_filename.startswith(skip_file_prefixes):
            frame = frame.f_back
    assert frame is not None
    warnings.warn_explicit(message, category or UserWarning, frame.f_code.co_filename, frame.f_lineno, source=source)


@pytest.fixture(params=["frame walk", "skip_file_prefixes"])
def way(request, monkeypatch):
    """Which way warn_at_callers_line takes; yields the skip_file_prefixes calls that reached ``warnings.warn``."""
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(integration, "WARN_SKIPS_FILE_PREFIXES", request.param == "skip_file_prefixes")
    if request.param == "skip_file_prefixes" and sys.version_info < (3, 12):
        emulated = types.SimpleNamespace(**vars(warnings))
        emulated.warn = functools.partial(warn_as_python_312, calls=calls)
        monkeypatch.setattr(integration, "warnings", emulated)
    yield request.param, calls


def test_both_ways_name_the_callers_line(way):
    """A warning raised deep in peft's injection (a base without a recorded seed), and one raised on this file's own
    call of the function: the user's line either way, never a line in peft, transformers or ut-peft."""
    torch.manual_seed(3)
    base = transformers.AutoModelForCausalLM.from_config(tiny_config("llama"))
    with pytest.warns(UserWarning, match="without a recorded seed") as record:
        line = sys._getframe().f_lineno + 1
        get_peft_model(base, UTReprogramConfig())
    located = {(w.filename, w.lineno) for w in record if "recorded seed" in str(w.message)}
    assert located == {(__file__, line)}

    with pytest.warns(UserWarning, match="^direct$") as record:
        line = sys._getframe().f_lineno + 1
        integration.warn_at_callers_line("direct")
    assert [(w.filename, w.lineno) for w in record] == [(__file__, line)]
    name, calls = way
    if name == "skip_file_prefixes" and sys.version_info < (3, 12):
        assert len(calls) == 2 and all(calls)  # both warnings went the 3.12 way


def test_the_python_312_way_passes_the_library_folders_as_a_tuple(monkeypatch):
    """warnings.warn refuses a list (TypeError on 3.12): the folders go as the tuple of str it takes."""
    seen = {}

    def record_call(message, category=None, stacklevel=1, source=None, *, skip_file_prefixes=()):
        seen.update(message=message, category=category, skip_file_prefixes=skip_file_prefixes)

    monkeypatch.setattr(integration, "WARN_SKIPS_FILE_PREFIXES", True)
    monkeypatch.setattr(integration, "warnings", types.SimpleNamespace(warn=record_call))
    integration.warn_at_callers_line("x", DeprecationWarning)
    prefixes = seen["skip_file_prefixes"]
    assert isinstance(prefixes, tuple) and all(isinstance(p, str) for p in prefixes)
    assert {os.path.basename(p.rstrip(os.sep)) for p in prefixes} == {"peft", "transformers", "ut_peft"}
    assert seen["message"] == "x" and seen["category"] is DeprecationWarning
