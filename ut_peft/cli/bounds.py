"""Slope bounds of a causal LM estimated as the accessibility paper's code does, beside ut-peft's own estimate.

    ut-peft bounds --model smollm2-135m --budget 600 --threads 1 \
        --output results/smollm2-135m/bounds-published.json --plot docs/figures/bounds-published-smollm2-135m.png
    ut-peft bounds --report-only --output results/smollm2-135m/bounds-published.json --plot bounds.png

Samples the final hidden state at the last position of random-token sequences at lengths 4, 8, ..., 4096 (up to
the model's context), toward 10,000 per length within --budget seconds (of this process's CPU time, or wall-clock
seconds with --clock wall) shared equally among the lengths; eps = r_inf / 2^11 and the box over every sample
(ut_peft.accessibility.stats.published_bounds). Also measures ut-peft's own estimate (--support-sequences sequences
of 32 tokens, eps = r_2 / 2^11, drawn below the tokenizer's count and charged ln of it, as every sweep's summary) and
prints both. A sweep folder beside the JSON (results/<model>/<sweep>/) reports it next to its own bounds once its
report is written again (``ut-peft cram --report-only --output FOLDER``). --output defaults to
results/<model>/bounds-published.json for a bundled model. An estimate or plot that is there is replaced only with
--overwrite, and one run at a time writes an --output (it holds <output>.lock, taken away when it is done).

|V|: the published estimate charges ln of the input embedding's rows, as the published code does. Where the model's
tokenizer holds fewer tokens (a padded embedding and head, e.g. Qwen2.5's 151936 rows for 151665 tokens), texts hold
no padding row, so the bounds over the tokenizer's tokens are recorded beside it (``extra.text_vocabulary``: the
same samples, charged ln of the tokenizer's count) and printed. ut-peft's own estimate is over those tokens already
(its ``vocab_size``, with the head's ``head_rows`` beside it, where they differ), as a sweep's summary is; a model
folder without a tokenizer, or with one whose ids are not 0..n-1, has it drawn over every row of the output head.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .common import (
    add_common_flags,
    check_model,
    check_output_file,
    given_flags,
    library_value,
    nonnegative_int,
    parse_args,
    positive_int,
    refuse_unused_flags,
    run,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..accessibility.stats.published_bounds import PublishedBoundEstimate
    from ..io import FileLock

# Written here, not imported: the module that holds them imports torch, and parsing comes first (library_value).
PUBLISHED_SEQUENCES = library_value("ut_peft.accessibility.stats.published_bounds:PUBLISHED_SEQUENCES", 10_000)
RESULT_FILE = library_value("ut_peft.accessibility.stats.published_bounds:RESULT_FILE", "bounds-published.json")


# The flags that decide how an estimate is measured (or whether one is replaced): --report-only reads the estimate
# --output holds, so it refuses them rather than dropping them without a word.
MEASUREMENT_FLAGS = (
    "budget",
    "clock",
    "wall_limit",
    "sequences_per_length",
    "lengths",
    "seed",
    "batch_size",
    "max_batch_tokens",
    "support_sequences",
    "threads",
    "overwrite",
    "no_progress",
)


def describe(estimate) -> str:
    """Both estimates with their settings, as the command prints them."""
    lines = [
        f"published estimate: {estimate.settings_text()}",
        f"  r_1 {estimate.r_1:.2f}, r_2 {estimate.r_2:.3f}, r_inf {estimate.r_inf:.3f}, eps {estimate.eps:.5f}; "
        f"ball {estimate.ball:.0f}, box {estimate.box:.0f} tokens per vector "
        f"(box at eps = r_2 / 2^11 on the same samples: {estimate.box_at_l2_eps:.0f})",
    ]
    lines.append(f"  stopped by: {estimate.stopped_by}")
    if estimate.lengths_not_sampled:
        lines.append(f"  not sampled: lengths {estimate.lengths_not_sampled}")
    lines.append(
        "  box by largest length: " + ", ".join(f"{p['max_length']}: {p['box']:.0f}" for p in estimate.by_max_length)
    )
    by_samples = ", ".join(f"{p['per_length']}: {p['box']:.0f}" for p in estimate.by_samples)
    lines.append(f"  box by sequences per length: {by_samples}")
    text = (estimate.extra or {}).get("text_vocabulary")
    if text and text["vocab_size"] != estimate.vocab_size:
        lines.append(
            f"  over the tokenizer's {text['vocab_size']} tokens (the embedding's other "
            f"{estimate.vocab_size - text['vocab_size']} rows are padding no text holds): ball {text['ball']:.0f}, "
            f"box {text['box']:.0f} tokens per vector"
            + (
                f"; ut-peft's: ball {text['ut_peft_ball']:.0f}, box {text['ut_peft_box']:.0f}"
                if "ut_peft_ball" in text
                else ""
            )
        )
    ref = estimate.ut_peft
    if ref:
        tokens = ""
        if "head_rows" in ref:  # a padded head only: drawn below the tokenizer's count, as a sweep draws
            padding = ref["head_rows"] - ref["vocab_size"]
            tokens = f" (of the tokenizer's {ref['vocab_size']} tokens; the head's other {padding} rows are padding)"
        lines.append(
            f"ut-peft estimate: {ref['num_sequences']} random-token sequences of {ref['seq_len']} tokens{tokens}, eps "
            f"= {ref['eps_rule']} = {ref['eps']:.5f} (r_2 {ref['r_2']:.3f}); ball {ref['ball']:.0f}, box "
            f"{ref['box']:.0f} tokens per vector"
        )
    lines.append(
        f"sampling: {estimate.cpu_seconds:.0f} CPU s, {estimate.wall_seconds:.0f} s wall, {estimate.threads} threads"
    )
    return "\n".join(lines)


def text_vocabulary(
    estimate: PublishedBoundEstimate, tokenizer: PreTrainedTokenizerBase | None, head_rows: int
) -> dict | None:
    """The estimate's bounds charged ln of the tokens ``tokenizer`` holds instead of ln of the input embedding's rows
    (``estimate.vocab_size``, the published rule); None without a tokenizer. The bounds are ln N / ln|V|: only the
    divisor changes. ut-peft's own estimate needs no such line: it is drawn over those tokens and charged ln of them
    already (:func:`~ut_peft.accessibility.stats.published_bounds.ut_peft_estimate`)."""
    if tokenizer is None:
        return None
    from ..geometry.output_path import text_vocab_size

    rows = estimate.vocab_size
    vocab = text_vocab_size(tokenizer, min(rows, head_rows))
    factor = math.log(rows) / math.log(vocab)
    out = {"vocab_size": vocab, "embedding_rows": rows, "head_rows": head_rows, "source": "tokenizer"}
    out |= {"ball": estimate.ball * factor, "box": estimate.box * factor}
    return out


def default_output(model: str) -> str | None:
    """``results/<model>/bounds-published.json`` for a bundled model (its canonical name, so ``smollm2`` and
    ``smollm2-135m`` share one file); None for a folder or hub id, which has no such name: main then asks for
    --output."""
    from ..models import canonical_model_name, is_bundled

    return f"results/{canonical_model_name(model)}/{RESULT_FILE}" if is_bundled(model) else None


def _check_recorded_model(model: str, output: Path, recorded: str | None) -> None:
    """Refuse a --model other than the model the estimate in ``output`` was measured on: its estimate would be
    printed as that model's."""
    from ..geometry.bounds import same_model

    if recorded is None:
        raise ValueError(
            f"--output {output} records no model, so --model {model} cannot be checked against it: drop --model to "
            "report the file's estimate"
        )
    if not same_model(model, recorded):
        raise ValueError(
            f"--model {model} is not the model the estimate in --output {output} was measured on ({recorded}): drop "
            "--model to report that estimate, or give --output the estimate of --model"
        )


def main(args):
    if args.output is None:
        raise ValueError(
            f"--model {args.model} is not a bundled model, so there is no results/<model>/ folder to default to: "
            f"give --output (e.g. results/<name>/{RESULT_FILE}, beside that model's sweep folders)"
        )
    output = check_output_file(args.output, "--output")
    plot = check_output_file(args.plot, "--plot") if args.plot else output.with_suffix(".png")
    if plot.resolve() == output.resolve():
        raise ValueError(f"--plot and --output are one file ({output}): give the plot another name")
    # Held until the estimate and its plot are written: a second run on this --output (started at the same time, so
    # that both would find no estimate there) is refused instead of replacing the first one's estimate; and so is one
    # of another --output that draws the same --plot.
    locks = [_lock_written_file(output, "--output", "written")]
    try:
        plot.parent.mkdir(parents=True, exist_ok=True)  # its lock lies beside it (the plot is written there anyway)
        locks.append(_lock_written_file(plot, "--plot", "drawn"))
        _measure_or_report(args, output, plot)
    finally:
        for lock in reversed(locks):
            _let_go(lock)


def lock_path(output: Path) -> Path:
    """The lock file of a run on ``output``: beside it, there only while a run holds it."""
    return output.with_name(output.name + ".lock")


def _lock_written_file(output: Path, flag: str, being: str) -> FileLock:
    """The lock of a run's output file (the estimate, ``flag`` --output, or its plot, --plot); a RuntimeError naming
    the run that holds it."""
    from ..io import lock_holder, take_lock

    path = lock_path(output)
    lock = take_lock(path)
    if lock is None:
        raise RuntimeError(
            f"{flag} {output} is being {being} by another ut-peft bounds run ({lock_holder(path)} holds {path}): "
            "wait for it to finish (then --report-only prints its estimate) or stop it, or give another "
            f"{flag}. A run that crashed or was killed lets go of the lock by itself"
        )
    return lock


def _let_go(lock: FileLock) -> None:
    """Take the lock file away while it is held (a run that opened it meanwhile finds that out and locks again:
    :func:`~ut_peft.io.take_lock`), then let go: no lock file stays beside the estimate."""
    try:
        if lock.in_place():
            lock.path.unlink()
    except OSError:
        pass  # a lock file that could not be taken away only stays; the lock is let go all the same
    finally:
        lock.release()


def _measure_or_report(args, output: Path, plot: Path) -> None:
    from ..accessibility.stats.published_bounds import (
        plot_estimate,
        published_bound_estimate,
        read_estimate,
        ut_peft_estimate,
        write_estimate,
    )

    if args.report_only:
        if not output.is_file():
            raise ValueError(f"--output {output} does not exist; run without --report-only to measure it")
        estimate = read_estimate(output)
        if args.model_given:
            _check_recorded_model(args.model, output, estimate.model)
    else:
        if output.exists() and not args.overwrite:
            raise ValueError(
                f"--output {output} already holds an estimate; pass --overwrite to measure again, or "
                "--report-only to redraw its plot"
            )
        if plot.exists() and not args.overwrite:  # the plot is finished work as the estimate is
            raise ValueError(
                f"--plot {plot} already exists; pass --overwrite to replace it (with the estimate --output names), "
                "or give another --plot"
            )
        for flag, value in (("--budget", args.budget), ("--wall-limit", args.wall_limit)):
            if value is not None and not value > 0:
                raise ValueError(f"{flag} must be a positive number of seconds (got {value:g})")
        check_model(args.model)
        import torch

        from ..models import load_model, load_tokenizer

        if args.threads:
            torch.set_num_threads(args.threads)
        model = load_model(args.model).eval()
        estimate = published_bound_estimate(
            model,
            lengths=args.lengths,
            sequences_per_length=args.sequences_per_length,
            budget_seconds=args.budget,
            clock=args.clock,
            wall_limit=args.wall_limit,
            seed=args.seed,
            batch_size=args.batch_size,
            max_batch_tokens=args.max_batch_tokens,
            model_name=args.model,
            progress=not args.no_progress,
        )
        try:
            tokenizer = load_tokenizer(args.model)
        except (OSError, ValueError, ModuleNotFoundError):  # a bare model folder: the rows are all there is
            tokenizer = None
        try:
            estimate.ut_peft = ut_peft_estimate(
                model, tokenizer=tokenizer, num_sequences=args.support_sequences, seed=args.seed
            )
        except ValueError as err:  # ids that are not 0..n-1: reported, not raised, as the sampling it follows is kept
            print(
                f"ut-peft bounds: ut-peft's estimate is drawn over every row of the output head: {err}",
                file=sys.stderr,
            )
            estimate.ut_peft = ut_peft_estimate(model, num_sequences=args.support_sequences, seed=args.seed)
        estimate.command = args.command_line
        try:
            text = text_vocabulary(estimate, tokenizer, model.get_output_embeddings().weight.shape[0])
        except ValueError as err:  # reported, not raised: the sampling it follows is kept
            print(f"ut-peft bounds: no bounds over the tokenizer's tokens: {err}", file=sys.stderr)
            text = None
        if text is not None:
            estimate.extra["text_vocabulary"] = text
        write_estimate(output, estimate)
    plot_estimate(estimate, plot)
    print(describe(estimate))
    print(f"wrote {output} and {plot}")


def parse(argv=None, *, prog: str | None = None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="bundled name, local folder or hub id")
    p.add_argument(
        "--budget",
        type=float,
        help="seconds of --clock for the sampling, shared equally among the lengths (default: no limit, the full "
        "target at every length)",
    )
    p.add_argument(
        "--clock",
        default="cpu",
        choices=["cpu", "wall"],
        help="what --budget counts: this process's CPU seconds (all threads; the same work on a busy machine) or "
        "wall-clock seconds",
    )
    p.add_argument(
        "--wall-limit",
        type=float,
        help="stop sampling after this many wall-clock seconds wherever it is (the lengths stay balanced)",
    )
    p.add_argument(
        "--sequences-per-length",
        type=positive_int,
        default=PUBLISHED_SEQUENCES,
        help=f"target per length (the paper: {PUBLISHED_SEQUENCES:,})",
    )
    p.add_argument(
        "--lengths", type=positive_int, nargs="+", help="sequence lengths (default: 4, 8, ..., 4096 up to the context)"
    )
    p.add_argument(
        "--seed", type=nonnegative_int, default=0, help="which random sequences (numpy's seeds are non-negative)"
    )
    p.add_argument("--batch-size", type=positive_int, default=64, help="sequences per forward pass at most")
    p.add_argument(
        "--max-batch-tokens",
        type=positive_int,
        default=1024,
        help="tokens per forward pass at most (memory at long lengths)",
    )
    p.add_argument("--support-sequences", type=positive_int, default=256, help="sequences of ut-peft's own estimate")
    p.add_argument("--threads", type=positive_int, help="torch threads (1 on a shared machine)")
    p.add_argument(
        "--output",
        help=f"the estimate's JSON (default: results/<model>/{RESULT_FILE}, <model> the bundled name --model names, "
        "where a sweep's report in results/<model>/<sweep>/ looks for it; another model needs --output)",
    )
    p.add_argument("--plot", help="the plot (default: --output with .png)")
    p.add_argument(
        "--overwrite", action="store_true", help="replace the estimate --output holds and the plot --plot names"
    )
    p.add_argument("--report-only", action="store_true", help="redraw the plot and print the estimate --output holds")
    p.add_argument("--no-progress", action="store_true")
    add_common_flags(p)
    # Read before parsing: a --config file's values become the parser's defaults, and are refused all the same.
    builtin = {name: p.get_default(name) for name in MEASUREMENT_FLAGS}
    builtin_model = {"model": p.get_default("model")}
    args = parse_args(p, argv)
    # --model given (not its default): under --report-only it is checked against the model the file records.
    args.model_given = bool(given_flags(p, argv, args, builtin_model))
    if args.report_only:  # the estimate is the file's: a flag that decides how to measure one would be dropped
        # Given on the command line or as a key of the --config file, whatever the value (--seed 0, the default, is
        # dropped all the same).
        refuse_unused_flags(
            p,
            argv,
            given_flags(p, argv, args, builtin),
            because="--report-only redraws the plot of the estimate --output holds",
            instead="measure again without --report-only (with --overwrite to replace the estimate)",
        )
    if args.output is None:
        args.output = default_output(args.model)
    args.command_line = shlex.join([*(prog or "ut-peft bounds").split(), *(sys.argv[1:] if argv is None else argv)])
    return args


if __name__ == "__main__":
    run(main, parse)
