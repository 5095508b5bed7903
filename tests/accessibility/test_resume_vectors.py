"""run_sweep(save_vectors=True) resuming a folder whose rows were crammed without it keeps those rows as they are,
without vectors. The command said so; from Python the library said nothing. Now run_sweep warns, naming how many
rows have none and how to get them, and the command's line is that warning (said once)."""

import warnings

import pytest

from ut_peft.accessibility import run_sweep, store
from ut_peft.accessibility.testing import crammable_model, small_sweep_config


@pytest.fixture(scope="module")
def llama():
    return crammable_model("llama")


def test_a_resume_with_save_vectors_warns_of_the_rows_without_vectors(llama, tmp_path):
    config = small_sweep_config(num_sequences=1)
    folder = tmp_path / "run"
    run_sweep(config, folder, model=llama, progress=False)
    crammed = len(store.read_rows(folder))
    assert store.rows_without_vectors(folder) == (crammed, crammed)
    with pytest.warns(UserWarning, match=rf"{crammed} of the {crammed} rows of .* have no saved vectors") as caught:
        run_sweep(config, folder, model=llama, progress=False, save_vectors=True)
    said = [str(w.message) for w in caught if "no saved vectors" in str(w.message)]
    assert len(said) == 1, said
    assert "save_vectors=True (--save-vectors" in said[0] and "overwrite=True (--overwrite)" in said[0], said[0]
    assert caught[0].filename == __file__  # the warning points at the caller's run_sweep line


def test_no_warning_where_every_row_has_its_vectors_or_none_were_asked_for(llama, tmp_path):
    config = small_sweep_config(num_sequences=1)
    folder = tmp_path / "run"
    run_sweep(config, folder, model=llama, progress=False, save_vectors=True)
    assert store.rows_without_vectors(folder)[0] == 0
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*no saved vectors")
        run_sweep(config, folder, model=llama, progress=False, save_vectors=True)
        run_sweep(config, folder, model=llama, progress=False)  # none asked for: nothing to say
