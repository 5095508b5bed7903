"""The fixed-universal-transformer comparison on k-hop and Dyck-1: run the plan one run at a time, then report.

    nice -n 10 python recipes/ut_experiments.py --threads 1                   # every planned run not finished yet
    for w in 1 2; do python recipes/ut_experiments.py --threads 1 & done      # two workers share the plan
    python recipes/ut_experiments.py --only khop-full-s0,khop-random-s0       # just these
    python recipes/ut_experiments.py --report-only                            # table + figure from the results file

Each run is ``ut_peft.tasks.training.run`` in ``runs/universal/<name>`` (resumable: rerunning continues the
checkpoint; a finished run is not trained again; a run another worker is training is skipped). One row per
finished run, with its learning curve and its CPU seconds, goes to ``results/universal/runs.jsonl``;
``--report-only`` turns that file into
``results/universal/table.md`` (mean +- std over seeds, per k, CPU time, the command of each row) and the figure
``docs/figures/universal-khop-curves.png`` (accuracy against steps per model kind, and per k at the end). Runs that
stopped early (budget) are reported from their checkpoint's curve, marked "unfinished" (faded in the figure).
"""

import argparse
import json
import shlex
import statistics
from pathlib import Path

import torch

from ut_peft.io import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "universal" / "runs.jsonl"
FIGURE = ROOT / "docs" / "figures" / "universal-khop-curves.png"
# Written by recipes/khop_baselines.py: what lookup tables of local context (no retrieval) reach, per k.
BASELINES = ROOT / "results" / "universal" / "khop-baselines.json"
NO_RETRIEVAL = ("position, last 3 letters", "position, current letter")

# The k-hop setting where the fully trained model reached ~99.99% in 4000 steps (notes, 2026-11-30): pre-LN residual
# blocks, 4 layers, 4 heads of 32, width 128, strings of 32 letters, k = 1..4 mixed in one model. 2000 steps here:
# on the shared 2 cores a 4000-step run of this shape took about an hour of wall time.
KHOP = dict(
    task="khop",
    variant="residual_layernorm",
    width=128,
    layers=4,
    heads=4,
    head_dim=32,
    steps=2000,
    warmup_steps=200,
    batch_size=64,
    train_examples=20000,
    eval_examples=2000,
    khop_ks=[1, 2, 3, 4],
    khop_length=32,
    eval_every=250,
    checkpoint_every=250,
)
DYCK = dict(KHOP, task="dyck", steps=1000, dyck_max_pairs=8, dyck_max_random_length=16)
DYCK.pop("khop_ks")
DYCK.pop("khop_length")
FULL = dict(backbone="random-ut", full=True, lr=1e-3)  # every weight trained: the target class
SPARSE = dict(backbone="sparse-ut", lr=3e-3)  # only E, U and learned positions trained
RANDOM = dict(backbone="random-ut", lr=3e-3)


def _rows(task_settings, kinds, seeds):
    return [
        (
            f"{task_settings['task']}-{kind}-s{seed}",
            {**task_settings, **overrides, "seed": seed, "backbone_seed": seed},
        )
        for seed in seeds
        for kind, overrides in kinds
    ]


# In priority order: the headline comparison at one seed, the ablations that test why fixed backbones fall short,
# Dyck-1, then more seeds.
PLAN = (
    _rows(KHOP, [("full", FULL), ("random", RANDOM)], [0])
    # The sparse construction at a shape it fits: one head of 16 needs 2Lk + |V| = 2*4*16 + 23 = 151 <= 160
    # columns; at width 128 with 4 heads of 32 its blocks wrap around and overlap. About 3x cheaper per step.
    + _rows(KHOP, [("sparse-fits", dict(SPARSE, heads=1, head_dim=16, width=160))], [0])
    + _rows(KHOP, [("sparse", SPARSE)], [0])
    + _rows(DYCK, [("full", FULL), ("sparse", SPARSE), ("random", RANDOM)], [0])
    # The same fitting shape fully trained (can that target class do the task?) and as a random backbone.
    + _rows(
        KHOP,
        [
            ("full-fits", dict(FULL, heads=1, head_dim=16, width=160)),
            ("random-fits", dict(RANDOM, heads=1, head_dim=16, width=160)),
        ],
        [0],
    )
    # A wider random backbone (twice the fully trained model's width; about 2.5x the step cost).
    + _rows(KHOP, [("random-wide", dict(RANDOM, width=256))], [0])
    + _rows(KHOP, [("full", FULL), ("sparse", SPARSE), ("random", RANDOM)], [1, 2])
    # Why the random backbone plateaus at ~55% (issue 12): the learning rate of E/U, training length. Compare with
    # the local-context baselines of recipes/khop_baselines.py (what a model that never retrieves can reach).
    + _rows(
        KHOP,
        [
            ("random-lr1e-2", dict(RANDOM, lr=1e-2)),
            ("random-lr1e-3", dict(RANDOM, lr=1e-3)),
            ("random-long", dict(RANDOM, steps=6000)),
        ],
        [0],
    )
    + _rows(KHOP, [("sparse-fits", dict(SPARSE, heads=1, head_dim=16, width=160))], [1, 2])
    # The paper's three variants side by side (issue 12 part 3): attention-only, and + MLP (fixed random MLPs in the
    # backbones), beside the residual + LayerNorm rows above, each as the fully trained model, the random backbone
    # of the same shape and the sparse construction where it fits.
    + _rows(
        KHOP,
        [
            (f"{kind}-{tag}", dict(overrides, variant=variant))
            for variant, tag in (("attention_only", "attn"), ("mlp", "mlp"))
            for kind, overrides in (
                ("full", FULL),
                ("random", RANDOM),
                ("sparse-fits", dict(SPARSE, heads=1, head_dim=16, width=160)),
            )
        ],
        [0],
    )
    + _rows(DYCK, [("full", FULL), ("sparse", SPARSE), ("random", RANDOM)], [1, 2])
    # Does the plateau break late, as induction heads often form after a long plateau? The cheapest fixed backbone
    # (the sparse construction where it fits, about 3x cheaper per step than m = 128) trained 10x longer.
    + _rows(
        KHOP, [("sparse-fits-long", dict(SPARSE, heads=1, head_dim=16, width=160, steps=20000, eval_every=1000))], [0]
    )
    # Dyck-1's fixed backbones below the paper's 100% / 94.4% at 1000 steps: is it training length?
    + _rows(
        DYCK,
        [
            ("sparse-long", dict(SPARSE, steps=5000, eval_every=500)),
            ("random-long", dict(RANDOM, steps=5000, eval_every=500)),
        ],
        [0, 1, 2],
    )
)


def command(name: str, settings: dict) -> str:
    """The recipes/reprogram.py command that makes this run on its own."""
    from ut_peft.tasks.training import RunSettings

    defaults = RunSettings()
    flags = []
    for key, value in settings.items():
        if value == getattr(defaults, key):
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list):
            flags.append(f"{flag} {','.join(map(str, value))}")
        else:
            flags.append(f"{flag} {value}")
    return (
        f"python recipes/reprogram.py {' '.join(flags)} --out runs/universal/{shlex.quote(name)} "
        f"--results results/universal/runs.jsonl"
    )


def load_rows(path: Path | None = None) -> dict[str, dict]:
    """The last row of each named run (in ``RESULTS`` unless ``path`` is given)."""
    path = RESULTS if path is None else path
    rows = {}
    if path.exists():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        if lines and not text.endswith("\n"):
            lines.pop()  # a line another worker is still writing (or a torn one): not a row yet
        for number, line in enumerate(lines, 1):
            if line.strip():
                row = json.loads(line)
                # A row written by recipes/reprogram.py has no name: its output folder is the name.
                name = row.get("name") or Path(row.get("saved_to", f"line-{number}/x")).parent.name
                rows[name] = row
    return rows


def unfinished_rows(finished: dict[str, dict]) -> dict[str, dict]:
    """Planned runs that stopped before the end (budget, kill): their curve so far, read from the checkpoint."""
    rows = {}
    for name, settings in PLAN:
        checkpoint = ROOT / "runs" / "universal" / name / "checkpoint.pt"
        if name in finished or not checkpoint.exists():
            continue
        state = torch.load(checkpoint, weights_only=False, map_location="cpu")
        progress = state.get("progress") or {}
        if not progress.get("curve"):
            continue
        last = progress["curve"][-1]
        rows[name] = {
            "name": name,
            "task": settings["task"],
            "settings": {**state["settings"]},
            "curve": progress["curve"],
            "accuracy": last["accuracy"],
            "per_k": last["per_k"],
            "train_cpu_seconds": progress["train_cpu_seconds"],
            "stopped_at": last["step"],
            "trainable_parameters": sum(t.numel() for t in state["trainable"].values()),
        }
    return rows


def run_plan(names: list[str]) -> None:
    """Train the planned runs not finished yet, in plan order (or in the order of ``names``).

    Several workers may share the plan (start this twice with ``--threads 1`` on two cores): a run another worker is
    training is skipped, and rows are appended whole."""
    from ut_peft.tasks.training import RunInProgressError, RunSettings, run

    plan = dict(PLAN)
    unknown = [name for name in names if name not in plan]
    if unknown:
        raise SystemExit(f"not in the plan: {', '.join(unknown)}; `--list` shows the planned runs")
    for name in names or list(plan):  # --only's order when given, else the plan's
        settings = plan[name]
        if name in load_rows():  # read again each time: another worker may have finished it meanwhile
            print(f"{name}: already in {RESULTS.relative_to(ROOT)}", flush=True)
            continue
        print(f"{name}: {command(name, settings)}", flush=True)
        try:
            # run() appends the row while it holds the run's lock, and only when it trained it: a run another worker
            # finished meanwhile comes back from its result.json without a second row. The row has no "name":
            # load_rows takes it from the output folder.
            row = run(
                RunSettings(**settings), ROOT / "runs" / "universal" / name, results_path=RESULTS, progress=False
            )
        except RunInProgressError as err:
            print(f"{name}: skipped, {err}", flush=True)
            continue
        print(
            f"{name}: accuracy {row['accuracy']:.4f} per k {row['per_k']} ({row['train_cpu_seconds']:.0f} CPU s)",
            flush=True,
        )


# ---- report ------------------------------------------------------------------------------------------------------


def _group(name: str) -> str:
    return name.rsplit("-s", 1)[0]


def _mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.mean(values):.1f} +- {100 * statistics.stdev(values):.1f}"


def table(rows: dict[str, dict]) -> str:
    plan = dict(PLAN)
    groups: dict[str, list[tuple[str, dict]]] = {}
    order = {name: index for index, name in enumerate(plan)}
    # Rows in plan order (the plan is written in reading order), not in the order the runs happened to finish.
    for name, row in sorted(rows.items(), key=lambda item: (order.get(item[0], len(order)), item[0])):
        groups.setdefault(_group(name), []).append((name, row))
    lines = [
        "| row | task | model | variant | shape (m, L, H x k) | steps | seeds | k=1 | k=2 | k=3 | k=4 | "
        "all (Dyck: answer) | CPU min per run | trainable |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    commands = []
    for group, members in groups.items():
        s = members[0][1]["settings"]
        model = "fully trained" if s["full"] else f"{s['backbone']} (E, U, positions)"
        per_k = [
            _mean_std([m[1]["per_k"][str(k)] for m in members]) if s["task"] == "khop" else "-" for k in (1, 2, 3, 4)
        ]
        cpu = statistics.mean(m[1]["train_cpu_seconds"] for m in members) / 60
        seeds = ",".join(str(m[1]["settings"]["seed"]) for m in members)
        stopped = [m[1]["stopped_at"] for m in members if "stopped_at" in m[1]]
        steps = f"{min(stopped)} of {s['steps']} (unfinished)" if stopped else str(s["steps"])
        variant = s["variant"].replace("_", " ")
        lines.append(
            f"| {group} | {s['task']} | {model} | {variant} | {s['width']}, {s['layers']}, {s['heads']} x "
            f"{s['head_dim']} | {steps} | {seeds} | {' | '.join(per_k)} | "
            f"{_mean_std([m[1]['accuracy'] for m in members])} | {cpu:.1f} | "
            f"{members[0][1]['trainable_parameters']:,} |"
        )
        commands += [command(name, plan.get(name, row["settings"])) for name, row in members]
    return "\n".join(lines) + "\n\nCommands, one per run:\n\n```\n" + "\n".join(commands) + "\n```\n"


# The figure's bars: the comparison rows and the two ablations that say most (the construction's target class
# trained, and the sparse backbone trained 10x longer). Every k-hop run is in the curves.
BAR_GROUPS = (
    "khop-full",
    "khop-random",
    "khop-sparse-fits",
    "khop-full-fits",
    "khop-sparse-fits-long",
    "khop-full-attn",
    "khop-random-attn",
    "khop-sparse-fits-attn",
)
KIND_COLOURS = {"fully trained": "C3", "random-ut": "C0", "sparse-ut": "C2"}
VARIANT_STYLES = {"residual_layernorm": "-", "attention_only": "--", "mlp": ":"}


def _kind(row: dict) -> str:
    return "fully trained" if row["settings"]["full"] else row["settings"]["backbone"]


def figure(rows: dict[str, dict], path: Path = FIGURE) -> None:
    """Curves coloured by model kind (fully trained, random, sparse) and styled by variant; bars per k for BAR_GROUPS.
    Runs stopped before their last step are drawn faded."""
    from ut_peft.plotting import save_figure, subplots

    khop = {n: r for n, r in rows.items() if r["task"] == "khop"}
    fig, (curves, per_k) = subplots(1, 2, figsize=(15, 4.5))
    labelled = set()
    for name, row in sorted(khop.items()):
        kind, variant = _kind(row), row["settings"]["variant"]
        label = f"{kind}, {variant.replace('_', ' ')}"
        steps = [point["step"] for point in row["curve"]]
        curves.plot(
            steps,
            [100 * point["accuracy"] for point in row["curve"]],
            color=KIND_COLOURS.get(kind, "C7"),
            linestyle=VARIANT_STYLES.get(variant, "-"),
            alpha=0.4 if "stopped_at" in row else 0.9,
            label=None if label in labelled else label,
        )
        labelled.add(label)
    curves.set(
        xlabel="training step",
        ylabel="token accuracy, k = 1..4 (%)",
        ylim=(0, 101),
        title="k-hop: held-out accuracy during training, every run",
    )
    curves.grid(alpha=0.3)
    curves.legend(fontsize=8)
    groups = [g for g in BAR_GROUPS if any(_group(n) == g for n in khop)]
    width = 0.8 / max(len(groups), 1)
    for i, group in enumerate(groups):
        members = [r for n, r in khop.items() if _group(n) == group]
        means = [100 * statistics.mean(m["per_k"][str(k)] for m in members) for k in (1, 2, 3, 4)]
        per_k.bar(
            [k + (i - (len(groups) - 1) / 2) * width for k in (1, 2, 3, 4)],
            means,
            width,
            color=f"C{i}",
            label=f"{group} ({len(members)} seed{'s' if len(members) > 1 else ''})",
        )
    if BASELINES.exists():
        tables = json.loads(BASELINES.read_text(encoding="utf-8"))
        for name, style in zip(NO_RETRIEVAL, ("-", ":")):
            label = f"lookup table: {name} (no retrieval)"
            curves.axhline(100 * tables[name]["all"], color="black", linestyle=style, linewidth=1, label=label)
            for k in (1, 2, 3, 4):
                per_k.hlines(
                    100 * tables[name][str(k)],
                    k - 0.45,
                    k + 0.45,
                    color="black",
                    linestyle=style,
                    linewidth=1.5,
                    label=label if k == 1 else None,
                )
        curves.legend(fontsize=7)
    per_k.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    per_k.set(
        xlabel="k (hops)",
        ylabel="token accuracy at the end (%)",
        ylim=(0, 101),
        xticks=[1, 2, 3, 4],
        title="k-hop: accuracy per k (mean over seeds)",
    )
    per_k.grid(alpha=0.3, axis="y")
    save_figure(fig, path, dpi=120)


def main(args) -> None:
    if args.list:
        for run_name, run_settings in PLAN:
            print(f"{run_name}: {command(run_name, run_settings)}")
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.report_only:
        run_plan([n for n in args.only.split(",") if n] if args.only else [])
    rows = load_rows()
    rows.update(unfinished_rows(rows))
    if not rows:
        raise SystemExit(f"no finished runs in {RESULTS}; run the plan first")
    report = table(rows)
    atomic_write_text(RESULTS.parent / "table.md", report)
    figure(rows)
    print(report)
    print(f"figure: {FIGURE.relative_to(ROOT)}")


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated run names from the plan, run in this order (default: all, plan order)",
    )
    parser.add_argument("--report-only", action="store_true", help="only the table and figure from the results")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--list", action="store_true", help="print the plan's names and commands, then stop")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
