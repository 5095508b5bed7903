"""Rows record the machine that wrote them (``host``), and a folder whose rows record none (written before they did)
resumes, reports and pools exactly as before: the field decides nothing and no settings comparison reads it."""

import json
import socket

import torch

from ut_peft.accessibility import run_sweep, store, summaries
from ut_peft.accessibility.config import SweepConfig
from ut_peft.accessibility.sweep import check_rows
from ut_peft.accessibility.testing import small_sweep_config


def lines(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines()]


def test_new_rows_record_the_host_they_were_written_on(tmp_path, llama):
    run_sweep(small_sweep_config(num_sequences=1), tmp_path, model=llama, progress=False, report=False)
    written = lines(tmp_path)
    assert written and all("host" in row for row in written)
    host = written[0]["host"]
    assert all(row["host"] == host for row in written) and host == store.host_record()
    assert host["name"] == socket.gethostname() and host["threads"] == torch.get_num_threads()
    assert isinstance(host["cpu"], str) and host["cpu"]
    assert "gpu" not in host or isinstance(host["gpu"], str)  # only where the run put CUDA to use
    assert store.host_label(host).startswith(socket.gethostname())


def test_a_folder_whose_rows_record_no_host_resumes_and_reports_as_before(tmp_path, llama):
    config = small_sweep_config(num_sequences=1)
    run_sweep(config, tmp_path, model=llama, progress=False, report=False)
    whole = summaries.read_summary(tmp_path).to_dict()
    old = [{k: v for k, v in row.items() if k != "host"} for row in lines(tmp_path)]  # as code before host wrote them
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in old[:-2]))
    (tmp_path / "summary.json").unlink()  # killed two rows before its end, by the code before

    settings = store.read_settings(tmp_path)
    assert not store.check_settings(tmp_path, settings, overwrite=False)  # resumes: nothing to clear, nothing refused
    run_sweep(config, tmp_path, model=llama, progress=False, report=False)
    mixed = lines(tmp_path)
    assert mixed[:-2] == old[:-2] and all("host" in row for row in mixed[-2:])  # old lines kept byte for byte
    rows = store.read_rows(tmp_path)
    check_rows(SweepConfig.from_settings(settings), settings, rows)
    assert store.rows_digest(rows) == store.rows_digest({tuple(r[k] for k in ("m", "n", "index")): r for r in old})
    assert summaries.read_summary(tmp_path).to_dict() == whole  # the same summary as the run that wrote no host
    for key, row in rows.items():  # the same row with and without a host is one measurement
        bare = store.Row.from_dict({k: v for k, v in row.items() if k != "host"})
        assert not row.conflicts_with(bare) and store.pool_rows([row, bare])[key] is not None
