"""What k-hop accuracy needs no retrieval: the best predictor from local context, per k (issue 12).

    python recipes/khop_baselines.py            # writes results/universal/khop-baselines.md

Each baseline is the Bayes-optimal lookup table for a feature set that a transformer gets without any content-based
attention: it is fitted (the majority answer per feature value) on the training strings of the k-hop runs (the
same builder, seed and size as ``recipes/ut_experiments.py``) and scored on their held-out strings, with the runs'
scoring (every position but the last, per k). A model whose accuracy sits at one of these rows has learned no more
than that feature set; an induction head (k = 1) has to beat "previous letters + letters seen so far".
"""

import argparse
from collections import Counter, defaultdict
from pathlib import Path

from ut_peft.tasks.khop import hop

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "universal" / "khop-baselines.md"
NONE = 5  # khop_vocab(): pad, a..d, <none>


def features(x: list[int], i: int, name: str):
    """The features of position i (the model has read x[0..i] and the k token)."""
    seen = frozenset(x[:i])  # letters before i: one uniform causal attention gives them
    prev = tuple(x[max(0, i - 2):i])
    return {
        "majority answer (k only)": (),
        "position": (i,),
        "position, current letter": (i, x[i]),
        "position, last 2 letters": (i, x[i], prev[-1:]),
        "position, last 3 letters": (i, x[i], prev),
        "position, last 3 letters, letters seen before": (i, x[i], prev, seen),
    }[name]


NAMES = ["majority answer (k only)", "position", "position, current letter", "position, last 2 letters",
         "position, last 3 letters", "position, last 3 letters, letters seen before"]


def strings(dataset):
    """(k, x) per row: the input is [k token] + x."""
    return [(row["k"], row["input_ids"][1:]) for row in dataset]


def baselines(train, evaluation) -> dict[str, dict[int, float]]:
    """Accuracy per feature set and k on ``evaluation`` of the majority answer per feature value on ``train``."""
    out = {}
    for name in NAMES:
        table = defaultdict(Counter)
        for k, x in train:
            target = hop(x, k, NONE)
            for i in range(len(x) - 1):
                table[k, features(x, i, name)][target[i]] += 1
        hits, total = Counter(), Counter()
        fallback = {k: Counter() for k, _ in train}
        for (k, _), counts in table.items():
            fallback[k].update(counts)
        for k, x in evaluation:
            target = hop(x, k, NONE)
            for i in range(len(x) - 1):
                counts = table.get((k, features(x, i, name))) or fallback[k]
                hits[k] += counts.most_common(1)[0][0] == target[i]
                total[k] += 1
        out[name] = {k: hits[k] / total[k] for k in sorted(total)}
        out[name]["all"] = sum(hits.values()) / sum(total.values())
    return out


def main(args) -> None:
    from ut_peft.tasks.khop import khop_dataset

    make = lambda n, seed: strings(khop_dataset(n, ks=args.ks, length=args.length, seed=seed))  # noqa: E731
    # The runs' seeds: training strings from seed 2 * s, held-out strings from 2 * s + 1 (tasks.training.task_data).
    result = baselines(make(args.train, 2 * args.seed), make(args.eval, 2 * args.seed + 1))
    ks = sorted(k for k in next(iter(result.values())) if k != "all")
    lines = [f"Local-context baselines for k-hop (strings of {args.length}, k = {', '.join(map(str, ks))} mixed, "
             f"{args.train} training strings, {args.eval} held-out, seed {args.seed}); token accuracy (%), "
             "every position but the last.", "",
             "| features | " + " | ".join(f"k={k}" for k in ks) + " | all |",
             "|---|" + "---|" * (len(ks) + 1)]
    for name, scores in result.items():
        lines.append(f"| {name} | " + " | ".join(f"{100 * scores[k]:.1f}" for k in ks) + f" | "
                     f"{100 * scores['all']:.1f} |")
    lines += ["", "Command: `python recipes/khop_baselines.py" + (f" --seed {args.seed}" if args.seed else "") + "`"]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2, 3, 4])
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--train", type=int, default=20000)
    parser.add_argument("--eval", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    main(parser.parse_args())
