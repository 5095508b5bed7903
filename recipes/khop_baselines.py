"""What k-hop accuracy needs no retrieval: the best predictor from local context, per k (issue 12).

    python recipes/khop_baselines.py                                  # writes results/universal/khop-baselines.md
    python recipes/khop_baselines.py --models khop-random-s0,khop-full-s0 # + how far those runs follow the tables
    python recipes/khop_baselines.py --models khop-sparse-fits-long-s0 --out results/universal/khop-long.md

Each baseline is the Bayes-optimal lookup table for a feature set that a transformer gets without any content-based
attention: it is fitted (the majority answer per feature value) on the training strings of the k-hop runs (the
same builder, seed and size as ``recipes/ut_experiments.py``) and scored on their held-out strings, with the runs'
scoring (every position but the last, per k). A model whose accuracy sits at one of these rows has learned no more
than that feature set; an induction head (k = 1) has to beat "previous letters + letters seen so far".
``--models`` reads the last checkpoint of runs in ``runs/universal`` and reports, per feature set, how often the
model gives the table's answer and how accurate it is where the table is wrong (what it knows beyond the table).
"""

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from ut_peft.tasks.khop import hop

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "universal" / "khop-baselines.md"
OUT_JSON = OUT.with_suffix(".json")  # the same numbers for recipes/ut_experiments.py's figure
NONE = 5  # khop_vocab(): pad, a..d, <none>


def features(x: list[int], i: int, name: str):
    """The features of position i (the model has read x[0..i] and the k token)."""
    seen = frozenset(x[:i])  # letters before i: one uniform causal attention gives them
    prev = tuple(x[max(0, i - 2) : i])
    return {
        "majority answer (k only)": (),
        "position": (i,),
        "position, current letter": (i, x[i]),
        "position, last 2 letters": (i, x[i], prev[-1:]),
        "position, last 3 letters": (i, x[i], prev),
        "position, last 3 letters, letters seen before": (i, x[i], prev, seen),
    }[name]


NAMES = [
    "majority answer (k only)",
    "position",
    "position, current letter",
    "position, last 2 letters",
    "position, last 3 letters",
    "position, last 3 letters, letters seen before",
]


def strings(dataset):
    """(k, x) per row: the input is [k token] + x."""
    return [(row["k"], row["input_ids"][1:]) for row in dataset]


def fit(train, name: str):
    """The majority answer per (k, feature value) on ``train``, and per k for values never seen."""
    table = defaultdict(Counter)
    for k, x in train:
        target = hop(x, k, NONE)
        for i in range(len(x) - 1):
            table[k, features(x, i, name)][target[i]] += 1
    fallback = defaultdict(Counter)
    for (k, _), counts in table.items():
        fallback[k].update(counts)
    return lambda k, x, i: (table.get((k, features(x, i, name))) or fallback[k]).most_common(1)[0][0]


def baselines(train, evaluation) -> dict[str, dict]:
    """Accuracy per feature set and k on ``evaluation`` of the majority answer per feature value on ``train``."""
    out = {}
    for name in NAMES:
        predict = fit(train, name)
        hits, total = Counter(), Counter()
        for k, x in evaluation:
            target = hop(x, k, NONE)
            for i in range(len(x) - 1):
                hits[k] += predict(k, x, i) == target[i]
                total[k] += 1
        out[name] = {k: hits[k] / total[k] for k in sorted(total)}
        out[name]["all"] = sum(hits.values()) / sum(total.values())
    return out


def model_predictions(run_dir: Path) -> tuple[list, list[list[int]], int]:
    """The held-out strings of a k-hop run, its model's answer at every scored position and the step, from the run's
    last checkpoint (written at the last step, so a finished run's final weights)."""
    import torch

    from ut_peft.tasks.training import RunSettings, build_model, collate, task_data

    state = torch.load(run_dir / "checkpoint.pt", weights_only=False, map_location="cpu")
    settings = RunSettings(**state["settings"])
    if settings.task != "khop":
        raise SystemExit(f"{run_dir} is a {settings.task} run; --model takes k-hop runs")
    _, evaluation, vocab_size, max_len = task_data(settings)
    model = build_model(settings, vocab_size, max_len)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, tensor in state["trainable"].items():
            params[name].copy_(tensor)
    model.eval()
    rows, answers = evaluation.to_list(), []
    with torch.no_grad():
        for start in range(0, len(rows), 256):
            batch = collate(rows[start : start + 256])
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            # The logits at input position i + 1 (which holds x_i) predict hop_k(x)_i.
            answers += logits.argmax(-1)[:, 1:-1].tolist()
    return strings(rows), answers, state["step"]


def torch_settings(name: str) -> dict:
    import torch

    return torch.load(ROOT / "runs" / "universal" / name / "checkpoint.pt", weights_only=False, map_location="cpu")[
        "settings"
    ]


def agreement(train, evaluation, answers) -> list[str]:
    """Per feature set: how often the model answers what the lookup table answers, and the model's accuracy where
    the table is wrong (near chance there = the model knows nothing the table does not)."""
    lines = [
        "| features | model agrees with the table | model accuracy where the table is right | "
        "model accuracy where the table is wrong |",
        "|---|---|---|---|",
    ]
    for name in NAMES:
        predict = fit(train, name)
        agree = right_hits = right_n = wrong_hits = wrong_n = total = 0
        for (k, x), answer in zip(evaluation, answers):
            target = hop(x, k, NONE)
            for i in range(len(x) - 1):
                guess = predict(k, x, i)
                agree += guess == answer[i]
                total += 1
                if guess == target[i]:
                    right_hits, right_n = right_hits + (answer[i] == target[i]), right_n + 1
                else:
                    wrong_hits, wrong_n = wrong_hits + (answer[i] == target[i]), wrong_n + 1
        lines.append(
            f"| {name} | {100 * agree / total:.1f} | {100 * right_hits / max(right_n, 1):.1f} | "
            f"{100 * wrong_hits / max(wrong_n, 1):.1f} |"
        )
    return lines


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(args) -> None:
    from ut_peft.io import atomic_write_text
    from ut_peft.tasks.khop import khop_dataset

    make = lambda n, seed: strings(khop_dataset(n, ks=args.ks, length=args.length, seed=seed))  # noqa: E731
    # The runs' seeds: training strings from seed 2 * s, held-out strings from 2 * s + 1 (tasks.training.task_data).
    result = baselines(make(args.train, 2 * args.seed), make(args.eval, 2 * args.seed + 1))
    ks = sorted(k for k in next(iter(result.values())) if k != "all")
    lines = [
        f"Local-context baselines for k-hop (strings of {args.length}, k = {', '.join(map(str, ks))} mixed, "
        f"{args.train} training strings, {args.eval} held-out, seed {args.seed}); token accuracy (%), "
        "every position but the last.",
        "",
        "| features | " + " | ".join(f"k={k}" for k in ks) + " | all |",
        "|---|" + "---|" * (len(ks) + 1),
    ]
    for name, scores in result.items():
        lines.append(
            f"| {name} | " + " | ".join(f"{100 * scores[k]:.1f}" for k in ks) + f" | {100 * scores['all']:.1f} |"
        )
    lines += [
        "",
        "Command: `python recipes/khop_baselines.py"
        + (f" --seed {args.seed}" if args.seed else "")
        + (f" --models {','.join(args.models)}" if args.models else "")
        + (f" --out {_shown(args.out)}" if args.out != OUT else "")
        + "`",
    ]
    for name in args.models:
        from ut_peft.tasks.training import RunSettings, task_data

        evaluation, answers, step = model_predictions(ROOT / "runs" / "universal" / name)
        train = strings(task_data(RunSettings(**torch_settings(name)))[0])
        lines += ["", f"`{name}` (step {step}) against the tables fitted on its own training strings:", ""]
        lines += agreement(train, evaluation, answers)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.out == OUT:  # the tables alone, for the figure; they do not depend on --models
        scores_by_table = {name: {str(k): v for k, v in scores.items()} for name, scores in result.items()}
        atomic_write_text(OUT_JSON, json.dumps(scores_by_table, indent=1) + "\n")
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2, 3, 4])
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--train", type=int, default=20000)
    parser.add_argument("--eval", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--models",
        type=lambda v: [n for n in v.split(",") if n],
        default=[],
        help="k-hop runs in runs/universal (comma-separated): how far their answers follow the tables",
    )
    parser.add_argument(
        "--out",
        type=lambda v: Path(v).resolve(),
        default=OUT,
        help=f"the report (default {OUT.relative_to(ROOT)}; its tables also go to the JSON beside it)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
