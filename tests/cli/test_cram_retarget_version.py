"""`ut-peft cram --retarget-from OLD` without --pooled-version: the new folder keeps the rules OLD ran (as a resume
keeps its own folder's), not the package's default version; --pooled-version changes them, as it always could."""

from ut_peft.accessibility.testing import pooled_sweep_settings, write_sweep_folder
from ut_peft.cli import cram as command

FLAGS = "--protocol published --source words --ms 1 3 --design pooled --target-slope-se 3 --target-n50-se 5"


def _config(old, new, *extra):
    argv = [*FLAGS.split(), "--retarget-from", str(old), "--output-dir", str(new), *extra]
    return command.sweep_config(command.parse(argv))


def test_a_retarget_keeps_the_rules_version_of_the_folder_it_retargets_from(tmp_path):
    old = tmp_path / "old"
    write_sweep_folder(old, pooled_sweep_settings(version=7), [(1, 10, 0, True, 100), (1, 20, 1, False, 900)])
    # Version 2 (the package's default) has a floor of 128 fitted rows where 7 has 64: taking it here would double
    # what the new folder crams, with nothing said.
    assert _config(old, tmp_path / "new").design.version == 7
    assert _config(old, tmp_path / "new", "--pooled-version", "2").design.version == 2
