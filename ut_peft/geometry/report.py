"""Write geometry and copy-task results as JSON, PNG plots and a Markdown section."""

from __future__ import annotations

from pathlib import Path

from ..io import atomic_write_json
from ..plotting import save_figure, subplots


def _token(tokenizer, token_id: int, vocab_size: int | None = None) -> str:
    if vocab_size is not None and token_id >= vocab_size:
        return f"padding row {token_id}"
    if tokenizer is None:
        return str(token_id)
    text = tokenizer.convert_ids_to_tokens(int(token_id))
    return repr(text)[1:-1].replace("|", "\\|") if text is not None else str(token_id)


def write_json(path, data: dict) -> Path:
    """``data`` without its in-memory entries (keys starting with ``_``) as JSON, written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_json(path, {k: v for k, v in data.items() if not k.startswith("_")})


def plot_cells(estimates: dict, path, title: str = "") -> Path:
    """Left: cell share against rank (log-log), per support and method. Right: the per-token decay of the median
    product of k cell shares, over ln|V|."""
    fig, (ax, bx) = subplots(1, 2, figsize=(11, 4))
    for support, by_method in estimates.items():
        for method, est in by_method.items():
            shares = est.shares.sort(descending=True).values
            shares = shares[shares > 0]
            ranks = range(1, len(shares) + 1)
            ax.loglog(ranks, shares.numpy(), label=f"{support}, {method}", ls="-" if method == "argmax" else "--")
            if method == "argmax":
                for estimate, ls in (("jeffreys", "-"), ("upper", ":")):
                    rows = est.median_product_decay(estimate=estimate)
                    bx.plot(
                        [r["k"] for r in rows],
                        [r["ratio_to_ln_vocab"] for r in rows],
                        ls=ls,
                        marker="o",
                        label=f"{support}, {estimate} shares",
                    )
    est = next(iter(next(iter(estimates.values())).values()))
    ax.axhline(1 / est.vocab_size, color="gray", lw=0.8, label="uniform 1/|V|")
    ax.set_xlabel("token rank")
    ax.set_ylabel("cell share")
    ax.set_title(f"decoder cells ({est.num_samples:,} samples)")
    ax.legend(fontsize=7)
    bx.axhline(1.0, color="gray", lw=0.8)
    bx.set_xscale("log", base=2)
    bx.set_xlabel("k (tokens)")
    bx.set_ylabel("-ln(median product of k shares) / (k ln|V|)")
    bx.set_title("per-token decay vs uniform cells")
    bx.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path, dpi=110)


PRENORM = "pre-norm (support measured at the final norm's input; final norm, then head)"


def geometry_markdown(
    result: dict, *, model_name: str = "", tokenizer=None, top: int = 10, command: str = "", plot: str | None = None
) -> str:
    """A README-ready Markdown section for :func:`ut_peft.geometry.analysis.analyze_model`'s result."""
    s, path, b = result["support"], result["output_path"], result["bounds"]
    softcap = f", logits soft-capped at {path['softcap']:g}" if path["softcap"] else ""
    vocab, rows = path["vocab_size"], path.get("head_rows", path["vocab_size"])
    padded = ""
    if rows != vocab:
        source = {"tokenizer": "the tokenizer's tokens"}.get(path.get("vocab_source"), path.get("vocab_source"))
        padded = (
            f" ({source}; the head has {rows} rows, the other {rows - vocab} padding rows that no text holds: they "
            "still own decoder cells, but the bounds count texts over |V|)"
        )
    lines = [
        f"Geometry of {model_name or 'the model'}: d = {path['hidden_size']}, |V| = {vocab}{padded}, "
        f"ln|V| = {path['ln_vocab']:.3f}; support from {s['num_samples']} random-token sequences: "
        f"r = {s['radius']:.3f}, eps = r/2^11 = {s['eps']:.2e}, mean box range {s['box_mean_range']:.3f}. "
        f"Points are {PRENORM if path['apply_final_norm'] else 'post-norm (head only)'}"
        f"{softcap}; "
        f"{result['num_samples']:,} samples per support.",
        "",
    ]
    if command:
        lines += ["```", command, "```", ""]
    lines += [
        "| support | method | observed tokens | entropy (nats) | effective tokens | top-1 share | "
        "decay k=64 / ln\\|V\\| (Jeffreys; upper) | argmax vs Voronoi |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for support, cells in result["cells"].items():
        for method in ("argmax", "voronoi"):
            c = cells[method]
            point, upper = (c["median_product_decay"][e][-1]["ratio_to_ln_vocab"] for e in ("jeffreys", "upper"))
            versus = ""
            if method == "voronoi":
                versus = (
                    f"disagree on {100 * c['disagreement_fraction']:.1f}% of points, "
                    f"TV {cells['argmax_vs_voronoi']['total_variation']:.3f}"
                )
            observed = f"{c['observed_tokens']} ({1 - c['unobserved_fraction']:.1%})"
            if rows != vocab and "observed_padding_rows" in c:
                observed += f" + {c['observed_padding_rows']} of {rows - vocab} padding rows"
            lines.append(
                f"| {support} | {method} | {observed} | "
                f"{c['entropy_nats']:.2f} | {c['effective_tokens']:.0f} | {c['top'][0]['share']:.3f} | "
                f"{point:.3f}; {upper:.3f} | {versus} |"
            )
    if rows != vocab:
        shares = ", ".join(
            f"{100 * cells['argmax'].get('padding_share', 0.0):.1f}% of the {support}"
            for support, cells in result["cells"].items()
        )
        lines += [
            "",
            f"Padding rows decide {shares} (argmax). The observed tokens count the {vocab} tokens of |V| (their "
            f"share is of |V|); the padding rows hit are counted apart, after the +.",
        ]
    lines += ["", "Largest argmax cells (share, 95% Wilson interval):", ""]
    for support, cells in result["cells"].items():
        tops = ", ".join(
            f"`{_token(tokenizer, t['token_id'], vocab)}` {t['share']:.3f} [{t['ci_low']:.3f}, {t['ci_high']:.3f}]"
            for t in cells["argmax"]["top"][:top]
        )
        conv = cells["argmax"]["convergence"]["checkpoints"]
        if len(conv) < 2:  # N = 1 leaves no earlier checkpoint to compare with
            lines.append(f"- {support}: {tops}. N = {result['num_samples']:,}: no convergence check.")
            continue
        lines.append(
            f"- {support}: {tops}. Convergence: total variation to the final shares "
            + ", ".join(f"{c['total_variation_to_final']:.3f} at N={c['num_samples']:,}" for c in conv[:-1])
            + f"; top-10 shares move at most {conv[-2]['max_change_in_half_widths']:.1f} CI half-widths "
            f"from N/2 to N."
        )
    measured = b.get("measured_slope")
    # Which slope it is: a pooled sweep's summary holds two (the per-m line's and the pooled line's).
    name = b.get("measured_slope_name")
    measured_note = f"; measured slope {measured:.2f}" + (f", {name}" if name else "") if measured else ""
    lines += [
        "",
        f"Slope bounds (tokens of n_50 per memory vector){measured_note}. "
        f"Cone half-angle {b['cone_half_angle_deg']:.1f} deg (ln cap share {b['cone_log_fraction']:.1f}); "
        f"non-uniform versions charge the per-token decay of the median product of k={b['decay_k']} cell "
        "shares instead of ln|V| (Jeffreys point estimates; conservative: Wilson upper limits, "
        "at least ln|V|):",
        "",
        "| bound | value |" + (" bound / measured |" if measured else ""),
        "|---|---|" + ("---|" if measured else ""),
    ]
    for name, value in b["bounds"].items():
        lines.append(f"| {name} | {value:.1f} |" + (f" {b['ratios'][name]:.1f} |" if measured else ""))
    if plot:
        lines += ["", f"![decoder cells]({plot})"]
    return "\n".join(lines) + "\n"


def plot_copy_cliff(runs: dict, trained: tuple, path, title: str = "copy task: exact match vs length") -> Path:
    """Exact match against length for each run ({label: [{"length", "exact_match", "token_accuracy"}]})."""
    fig, ax = subplots(figsize=(7, 4))
    ax.axvspan(trained[0], trained[1], color="0.9", label=f"trained lengths {trained[0]}-{trained[1]}")
    for label, rows in runs.items():
        rows = sorted(rows, key=lambda r: r["length"])
        ax.plot([r["length"] for r in rows], [r["exact_match"] for r in rows], marker="o", ms=3, label=label)
        ax.plot(
            [r["length"] for r in rows],
            [r["token_accuracy"] for r in rows],
            ls=":",
            lw=1,
            color=ax.lines[-1].get_color(),
        )
    ax.set_xlabel("string length")
    ax.set_ylabel("exact match (solid), token accuracy (dotted)")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return save_figure(fig, path, dpi=110)


def unfinished_trainings(result: dict) -> list[str]:
    """The trainings a copy_task.json's run was asked for (``settings["trainings"]``) that it holds no results of:
    the file is written after every training, so a run that failed or was killed between them leaves the finished
    ones only. Empty for a finished file, and for a file that does not record them (a combined file, or one written
    before they were recorded: those were only ever written whole or mid-run alike, and are read as before)."""
    asked = (result.get("settings") or {}).get("trainings") or []
    return [training for training in asked if training not in result.get("runs", {})]


def copy_markdown(result: dict, *, command: str = "", plot: str | None = None) -> str:
    """A Markdown section for copy-task runs (``{"runs": {label: run_copy(...) result}}``); the cliffs are
    recomputed from the per-length results, for exact match and for token accuracy. A partial run's file (see
    :func:`unfinished_trainings`) is labelled so above its table."""
    from .copy_task import cliff

    lines = []
    unfinished = unfinished_trainings(result)
    if unfinished:
        asked = ", ".join(result["settings"]["trainings"])
        lines += [
            f"**Partial run: {', '.join(unfinished)} of the trainings asked for ({asked}) did not finish** (the run "
            "failed or was killed); the table holds the finished ones only.",
            "",
        ]
    if command:
        lines += ["```", command, "```", ""]
    lines += [
        "| training | trainable params | steps | train time | exact match: mean over trained lengths / at "
        "the longest / just beyond | last length >= 0.99 | exact match 0.5 at | token accuracy: at the "
        "longest -> just beyond | token accuracy 0.9 -> 0.1 between |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def f(x, fmt="{:.0f}"):
        return "-" if x is None else fmt.format(x)

    for label, run in result["runs"].items():
        shortest, top = run["train_lengths"]
        c = cliff(run["results"], top, trained_min=shortest)
        t = cliff(run["results"], top, trained_min=shortest, metric="token_accuracy")
        lines.append(
            f"| {label} | {run['trainable_parameters']:,} | {run['steps']} | {run['seconds']:.0f} s | "
            f"{f(c['mean_in_range'], '{:.2f}')} / {f(c['at_trained_max'], '{:.2f}')} / "
            f"{f(c['first_beyond'], '{:.2f}')} | {f(c['last_length_at_0.99'])} | {f(c['length_at_0.5'])} | "
            f"{f(t['at_trained_max'], '{:.3f}')} -> {f(t['first_beyond'], '{:.3f}')} | "
            f"{f(t['length_at_0.9'])} -> {f(t['length_at_0.1'])} |"
        )
    if plot:
        lines += ["", f"![copy cliff]({plot})"]
    return "\n".join(lines) + "\n"
