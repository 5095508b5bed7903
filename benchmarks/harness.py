"""What every benchmark here shares: interleaved repeats, medians with ranges, a load check, a matmul calibration,
FLOP counting and a JSON record.

A benchmark script imports it as ``import harness`` (``python benchmarks/x.py`` puts this folder on the path):

    parser = argparse.ArgumentParser(); harness.add_arguments(parser)     # --repeats, --json PATH, --max-load
    run = harness.Run("my_benchmark", args)                                # records the load from here on
    times = harness.interleave({"ours": ours, "baseline": baseline}, args.repeats)
    ratio = harness.ratio_spread(seconds(times["ours"]), seconds(times["baseline"]))
    print(f"speed-up {harness.format_ratio(ratio)}")
    run.finish(results)                                                    # load line, WARNING, JSON

Why each piece:

- Repeats, interleaved. Each repeat runs every variant once, and the order rotates from one repeat to the next (A B,
  B A, A B, ...), so slow drift of a shared machine's speed hits all variants alike. A figure is the median over
  the repeats with its range (min-max); a ratio is the median of the per-repeat ratios (variant A's time in
  repeat r over variant B's time in repeat r) with the range of those ratios, so the range says how far one
  paired measurement can stray.
- Load. Every second while the benchmark runs (a background thread), and at the start and end, the watch reads
  the 1-minute load average (``os.getloadavg``) and, on Linux, counts the threads that are running or waiting for
  a core (state R in ``/proc``), in this benchmark's own process tree and elsewhere. Other jobs' runnable threads
  are what slows variants unevenly, and the load average cannot tell them from the benchmark's own: a benchmark
  that keeps both cores of an idle 2-core machine busy reads a load of about 2.0-2.1 by itself. So where /proc can
  be read, a run is quiet when other jobs averaged at most ``--max-others`` runnable threads (default 0.25: a
  quarter of one core) over the run; elsewhere, when the load average never exceeded the CPU count. ``--max-load``
  adds the load criterion on Linux too. A run that is not quiet prints a WARNING and records ``"quiet": false``:
  such a run is not one to quote.
- Calibration. A float32 and a bf16 matrix product at the benchmark's scale, timed for a few hundred ms, give the
  GFLOP/s this machine actually reaches; a variant's FLOPs over its time, divided by that, is the fraction of the
  measured peak it runs at, a figure that travels between machines better than seconds do.
- FLOPs. ``count_flops`` runs a function under ``torch.utils.flop_counter.FlopCounterMode`` (matrix products,
  convolutions and attention; element-wise work is not counted), with PyTorch's CPU flash-attention kernels added
  (its table lists only the CUDA ones). Attention counts the whole (L, L) score matrix, causal or not, as
  PyTorch's own formula does.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ut_peft.io import append_jsonl, atomic_write_text, read_jsonl

T = TypeVar("T")  # what one variant's call returns


def add_arguments(parser, *, repeats: int | None = 3) -> None:
    """Add ``--repeats`` (unless ``repeats`` is None: the script has its own count), ``--json`` and ``--max-load``."""
    if repeats is not None:
        parser.add_argument(
            "--repeats", type=int, default=repeats, help=f"times each variant runs, interleaved (default {repeats})"
        )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument(
        "--max-load",
        type=float,
        default=None,
        help="1-minute load average above which the run is not quiet (default: the CPU count, "
        "where other jobs' threads cannot be counted; not checked where they can)",
    )
    parser.add_argument(
        "--max-others",
        type=float,
        default=0.25,
        help="other jobs' runnable threads, averaged over the run, above which it is not quiet (Linux; default 0.25)",
    )


# --- arithmetic -------------------------------------------------------------------------------------------------


def spread(values) -> dict:
    """Median, min and max of ``values`` (and the values themselves)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("spread of no values: run at least one repeat")
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def ratio_spread(numerators, denominators) -> dict:
    """The spread of the per-repeat ratios ``numerators[r] / denominators[r]``."""
    numerators, denominators = list(numerators), list(denominators)
    if len(numerators) != len(denominators):
        raise ValueError(
            f"paired ratios need as many numerators as denominators (got {len(numerators)} and {len(denominators)})"
        )
    return spread(a / b for a, b in zip(numerators, denominators))


def format_spread(s: dict, digits: int = 2, unit: str = "") -> str:
    """``12.30 s (11.90-12.80)``: the median, then the range."""
    return f"{s['median']:.{digits}f}{unit} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def format_ratio(s: dict, digits: int = 2) -> str:
    n = len(s["values"])
    return (
        f"{s['median']:.{digits}f}x (median; range {s['min']:.{digits}f}-{s['max']:.{digits}f} over "
        f"{n} repeat{'s' if n != 1 else ''})"
    )


def format_count(value: float, unit: str = "FLOP") -> str:
    """``1.23 GFLOP``: a count with an SI prefix."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def rotations(names, repeats: int) -> list[list[str]]:
    """The order of the variants in each repeat: rotated by one each time (A B, B A, ... for two variants)."""
    names = list(names)
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1 (got {repeats})")
    return [names[r % len(names) :] + names[: r % len(names)] for r in range(repeats)]


def interleave(variants: Mapping[str, Callable[[int], T]], repeats: int) -> dict[str, list[T]]:
    """Call each variant once per repeat, in :func:`rotations` order; ``variants[name](r)`` gets the repeat index.

    Returns each variant's results in repeat order.
    """
    results: dict[str, list[T]] = {name: [] for name in variants}
    for r, order in enumerate(rotations(variants, repeats)):
        for name in order:
            results[name].append(variants[name](r))
    return results


def timed_cram(model, jobs, config, **kwargs) -> tuple[float, list]:
    """Seconds to cram every job (``ut_peft``'s engine, ``kwargs`` its policies), and the results as (key, steps,
    final loss, vectors) in key order, to compare variants' results bit for bit."""
    from ut_peft.accessibility.engine.cram import cram

    start = time.perf_counter()
    results = list(cram(model, jobs, config, **kwargs))
    seconds = time.perf_counter() - start
    return seconds, sorted((r.job.key, r.steps, r.final_loss, r.vectors) for r in results)


def timed_steps(model, jobs, steps: int, *, policies: dict | None = None, **engine) -> tuple[float, list]:
    """:func:`timed_cram` of ``jobs`` in one batch for ``steps`` updates each under the published protocol's layout
    and init (no patience stop before them), ``engine`` the CramConfig fields the variant sets (autocast, the logits
    budget, the forward groups, ...), ``policies`` the engine's policy arguments."""
    from ut_peft.accessibility.engine.jobs import CramConfig
    from ut_peft.accessibility.engine.protocol import cram_settings

    config = cram_settings(
        "published", CramConfig(max_steps=steps, patience=steps + 1, batch_size=len(jobs), **engine)
    )
    return timed_cram(model, jobs, config, **(policies or {}))


def same_row(x: tuple, y: tuple) -> bool:
    """Two :func:`timed_cram` results of one row, equal to the bit: key, steps, final loss and vectors."""
    import torch

    return x[:3] == y[:3] and torch.equal(x[3], y[3])


def compare_crams(a: list, b: list) -> dict:
    """Two :func:`timed_cram` outputs of the same jobs side by side: whether they are bit-identical, in how many rows,
    and else the largest gaps of a final loss and of a vector element (other kernels' sums round differently)."""
    if [x[0] for x in a] != [y[0] for y in b]:
        raise ValueError(f"the two crams finished other rows: {[x[0] for x in a]} against {[y[0] for y in b]}")
    rows = sum(same_row(x, y) for x, y in zip(a, b))
    return {
        "bit_identical": rows == len(a),
        "bit_identical_rows": rows,
        "largest_loss_gap": max((abs(x[2] - y[2]) for x, y in zip(a, b)), default=0.0),
        "largest_vector_gap": max((float((x[3] - y[3]).abs().max()) for x, y in zip(a, b)), default=0.0),
    }


def interleave_kept(
    variants: Mapping[str, Callable[[], tuple[float, T]]], repeats: int
) -> tuple[dict[str, list[float]], dict[str, T]]:
    """:func:`interleave` for variants whose call returns ``(seconds, output)``: each variant's seconds in repeat
    order, and its output of the first repeat (kept to compare the variants' results, e.g. bit for bit)."""
    kept: dict[str, T] = {}

    def timed(name: str) -> Callable[[int], float]:
        def call(repeat: int) -> float:
            seconds, output = variants[name]()
            kept.setdefault(name, output)
            return seconds

        return call

    return interleave({name: timed(name) for name in variants}, repeats), kept


# --- load -------------------------------------------------------------------------------------------------------


def runnable_threads(root: int | None = None) -> tuple[int, int] | None:
    """Threads running or waiting for a core now (state R): (in ``root``'s process tree, elsewhere).

    ``root`` defaults to this process, so a benchmark's children count as its own. None where /proc cannot be read
    (not Linux). Processes that end while being read are skipped.
    """
    proc = Path("/proc")
    try:
        pids = [int(name) for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return None
    parent, running = {}, {}
    for pid in pids:
        try:
            stat = (proc / str(pid) / "stat").read_text()
            parent[pid] = int(stat[stat.rindex(")") + 2 :].split()[1])
            count = 0
            for tid in os.listdir(proc / str(pid) / "task"):
                task = (proc / str(pid) / "task" / tid / "stat").read_text()
                count += task[task.rindex(")") + 2] == "R"
            running[pid] = count
        except (OSError, ValueError, IndexError):
            continue
    if not running:
        return None
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    ours, stack = set(), [root or os.getpid()]
    while stack:
        pid = stack.pop()
        ours.add(pid)
        stack += children.get(pid, [])
    return (
        sum(n for pid, n in running.items() if pid in ours),
        sum(n for pid, n in running.items() if pid not in ours),
    )


class LoadWatch:
    """The 1-minute load average, and other jobs' runnable threads, at the start, every ``interval`` seconds in a
    background thread, and at the end (see the module's docstring for what makes a run quiet)."""

    def __init__(
        self,
        limit: float | None = None,
        interval: float = 1.0,
        getloadavg=os.getloadavg,
        runnable=runnable_threads,
        max_others: float = 0.25,
    ):
        self.cpu_count = os.cpu_count() or 1
        self.interval, self._getloadavg, self._runnable = interval, getloadavg, runnable
        self.max_others = float(max_others)
        self.counts_others = runnable is not None and runnable() is not None
        # Where other jobs' threads can be counted, the load average is checked only when asked (``limit``).
        self.limit = float(limit) if limit is not None else None if self.counts_others else float(self.cpu_count)
        self.start_load: tuple[float, float, float] | None = None
        self.end_load: tuple[float, float, float] | None = None
        self.highest = 0.0
        self.others: list[int] = []
        self.ours: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> tuple[float, float, float]:
        load = tuple(self._getloadavg())
        self.highest = max(self.highest, load[0])
        counts = self._runnable() if self.counts_others else None
        if counts is not None:
            self.ours.append(counts[0])
            self.others.append(counts[1])
        return load

    @property
    def others_mean(self) -> float | None:
        return sum(self.others) / len(self.others) if self.others else None

    def start(self) -> LoadWatch:
        self.start_load = self.sample()
        if self.interval:
            self._thread = threading.Thread(target=self._watch, name="load-watch", daemon=True)
            self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def stop(self) -> LoadWatch:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.end_load = self.sample()
        return self

    @property
    def load_quiet(self) -> bool:
        return self.limit is None or self.highest <= self.limit

    @property
    def others_quiet(self) -> bool:
        return self.others_mean is None or self.others_mean <= self.max_others

    @property
    def quiet(self) -> bool:
        return self.load_quiet and self.others_quiet

    @property
    def busy_at_start(self) -> bool:
        """Before the benchmark's own work weighs in, a 1-minute load near the CPU count means other jobs."""
        return self.start_load is not None and self.start_load[0] > self.cpu_count - 0.5

    def summary(self) -> dict:
        mean = lambda values: round(sum(values) / len(values), 3) if values else None  # noqa: E731
        return {
            "cpu_count": self.cpu_count,
            "limit": self.limit,
            "start": list(self.start_load or ()),
            "end": list(self.end_load or ()),
            "highest_1min": self.highest,
            "max_others": self.max_others,
            "others_runnable_mean": mean(self.others),
            "others_runnable_max": max(self.others, default=None),
            "ours_runnable_mean": mean(self.ours),
            "samples": len(self.others),
            "quiet": self.quiet,
        }

    def line(self) -> str:
        start = f"{self.start_load[0]:.2f}" if self.start_load else "?"
        end = f"{self.end_load[0]:.2f}" if self.end_load else "?"
        line = (
            f"load average (1 min): {start} at start, {end} at end, highest {self.highest:.2f}; {self.cpu_count} CPUs"
        )
        if self.others:
            line += (
                f"; other jobs' runnable threads: mean {self.others_mean:.2f} (max {max(self.others)}), this "
                f"benchmark's: mean {sum(self.ours) / len(self.ours):.2f}, over {len(self.others)} samples"
            )
        return line

    def warning(self) -> str | None:
        if self.quiet:
            return None
        why = []
        if not self.others_quiet:
            why.append(f"other jobs averaged {self.others_mean:.2f} runnable threads, above {self.max_others:g}")
        if not self.load_quiet:
            why.append(
                f"the 1-minute load average reached {self.highest:.2f}, above {self.limit:g} (the CPU count "
                f"is {self.cpu_count})"
            )
        reasons = "; ".join(why)
        return (
            f"WARNING: NOT A QUIET RUN. {reasons[0].upper() + reasons[1:]}: other jobs were waiting for the "
            "cores, so the times and ratios above are inflated unevenly. Do not quote them; rerun on a quiet "
            "machine."
        )


# --- calibration and FLOPs --------------------------------------------------------------------------------------

DTYPES = {
    "fp32": "float32",
    "float32": "float32",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
}


def calibrate_matmul(
    m: int, k: int, n: int, dtypes=("float32", "bfloat16"), seconds: float = 0.3, device: str | None = None
) -> dict:
    """GFLOP/s of an (m, k) x (k, n) matrix product in each dtype, timed for about ``seconds`` each.

    This is the machine's measured matmul peak at the benchmark's scale (threads as torch has them now).
    """
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    out = {"shape": [m, k, n], "device": device, "threads": torch.get_num_threads(), "gflops": {}}
    for name in dtypes:
        dtype = getattr(torch, DTYPES[name])
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        calls = 0
        for _ in range(2):  # warm-up: thread pools, kernels chosen on first use
            a @ b
        _sync(device)
        start = time.perf_counter()
        while True:
            a @ b
            calls += 1
            if calls % 4 == 0:
                _sync(device)
                elapsed = time.perf_counter() - start
                if elapsed >= seconds:
                    break
        out["gflops"][DTYPES[name]] = 2.0 * m * k * n * calls / elapsed / 1e9
    return out


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def format_calibration(cal: dict) -> str:
    m, k, n = cal["shape"]
    rates = ", ".join(f"{name} {g:.3g} GFLOP/s" for name, g in cal["gflops"].items())
    return f"matmul calibration ({m}x{k} @ {k}x{n} on {cal['device']}, {cal['threads']} threads): {rates}"


def peak_fraction(flops: float, seconds: float, gflops: float) -> float:
    """The fraction of a measured peak (GFLOP/s) that ``flops`` in ``seconds`` reach."""
    return flops / seconds / (gflops * 1e9)


def _sdpa_flops(query_shape, key_shape, value_shape, backward: bool) -> int:
    # Q K^T and P V, each 2 * b * h * Lq * Lk * d; the backward computes four such products (dP, dV, dQ, dK).
    # Heads come from the query: with grouped-query attention the keys may have fewer.
    b, h, lq, d = query_shape
    forward = 2 * b * h * lq * key_shape[-2] * (d + value_shape[-1])
    return 2 * forward if backward else forward


def _cpu_flash_forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return _sdpa_flops(query_shape, key_shape, value_shape, backward=False)


def _cpu_flash_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return _sdpa_flops(query_shape, key_shape, value_shape, backward=True)


def count_flops(fn: Callable, *args, **kwargs) -> tuple[object, int]:
    """``(fn(*args, **kwargs), FLOPs it ran)``, counted by ``FlopCounterMode`` with the CPU flash kernels added."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    mapping = {
        aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_forward,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward,
    }
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        result = fn(*args, **kwargs)
    return result, counter.get_total_flops()


# --- the run record ---------------------------------------------------------------------------------------------


def machine() -> dict:
    info = {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as handle:
            info["cpu"] = next(
                (line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")),
                platform.processor(),
            )
    except OSError:
        info["cpu"] = platform.processor()
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        info.update(
            torch=torch.__version__,
            torch_threads=torch.get_num_threads(),
            cuda=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        )
    return info


class Run:
    """One benchmark run: watches the load from creation, then prints the load line and writes the JSON record."""

    def __init__(
        self, benchmark: str, args=None, *, interval: float = 1.0, getloadavg=os.getloadavg, runnable=runnable_threads
    ):
        self.args = args
        self.record: dict[str, Any] = {
            "benchmark": benchmark,
            "command": [Path(sys.argv[0]).name] + sys.argv[1:],
            "arguments": {
                k: (str(v) if isinstance(v, Path) else v) for k, v in (vars(args) if args is not None else {}).items()
            },
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self.load = LoadWatch(
            getattr(args, "max_load", None), interval, getloadavg, runnable, getattr(args, "max_others", 0.25)
        ).start()
        if self.load.busy_at_start or not self.load.quiet:  # say so at once: a user may rather wait for quiet
            assert self.load.start_load is not None  # start() sampled it
            print(
                f"WARNING: the machine is busy before the benchmark starts (1-minute load average "
                f"{self.load.start_load[0]:.2f}, {self.load.cpu_count} CPUs): times and ratios will be inflated "
                "unevenly; better stop and rerun on a quiet machine.",
                flush=True,
            )

    def finish(self, results: dict) -> dict:
        """Stop watching; print the load line (and the WARNING); write ``--json``; return the whole record."""
        self.load.stop()
        self.record.update(
            machine=machine(),
            finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            load=self.load.summary(),
            quiet=self.load.quiet,
            results=results,
        )
        print(self.load.line())
        if not self.load.quiet:
            print(self.load.warning())
        path = getattr(self.args, "json", None)
        if path:
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(self.record, indent=2, default=str) + "\n")
            print(f"results written to {path}")
        return self.record


def read_records(output) -> list[dict]:
    """The records a resumable benchmark's JSONL output holds (none where it does not exist yet); a last line a
    killed writer left torn is skipped (:func:`ut_peft.io.read_jsonl`)."""
    return [record for _, record in read_jsonl(output)]


def keep_records(output, records: list[dict], new) -> None:
    """Append each record of ``new`` to ``output`` as it comes, and to ``records``: one fsynced whole line each
    (:func:`ut_peft.io.append_jsonl`), so a kill loses at most the record being measured and a rerun resumes."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    for record in new:
        append_jsonl(output, record, sort_keys=True)
        records.append(record)
