"""At a row's trained memory, how hard can the optimizer push each prediction? A mechanism check for stalls.

    git archive 880c916 results/gemma-3-270m/pooled-words-glove-v3 | tar -x -C /tmp/round8   # round 8 in flight
    python benchmarks/stall_gradients.py /tmp/round8/results/gemma-3-270m/pooled-words-glove-v3 \\
        --outcomes results/gemma-3-270m/pooled-words-glove-v3 \\
        --output results/benchmarks/stall_gradients_gemma_words_glove.jsonl
    python benchmarks/stall_gradients.py --output results/benchmarks/stall_gradients_gemma_words_glove.jsonl \\
        --report-only

A first-token stall is a row whose memory never made the model predict its first target token, though it may get
every later one right. benchmarks/first_prediction_reach.py measures how far random memories move each prediction;
this reads the memories a real run had trained when it was snapshotted (a sweep folder's ``inflight/`` rows, their
texts and layout rebuilt from its settings) and asks, at each of them, how steep each prediction's margin is in the
memory: the margin at a predicted position is the target's logit less the largest other logit (positive: predicted
right), and its steepness the norm of its gradient with respect to the memory vectors, which is what an optimizer
step on that position's loss has to work with. A first prediction that is wrong and far flatter than the later ones
(which the same memory already gets right) is a position the memory hardly reaches, not a token it cannot hold.

``--positions K`` measures the first prediction and K - 1 later ones spread evenly over the row (one backward pass
each). ``--outcomes FOLDER``: a folder whose rows.jsonl holds how the snapshotted rows ended (the folder they were
crammed in, later), so the table says which ended as stalls. Each line of ``--output`` is one row at one snapshot;
a rerun skips the rows it holds.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from statistics import median

import harness
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ut_peft.accessibility import store  # noqa: E402
from ut_peft.accessibility.engine.forward import prefix_embeds  # noqa: E402


def spread_positions(predicted: int, count: int) -> list[int]:
    """The first predicted position and ``count`` - 1 later ones spread evenly up to the last, without repeats."""
    if count >= predicted:
        return list(range(predicted))
    later = {round(1 + i * (predicted - 2) / max(count - 2, 1)) for i in range(count - 1)}
    return [0, *sorted(later)]


def margin_gradients(model, prefix: torch.Tensor, ids: list[int], vectors: torch.Tensor, given: int, positions):
    """At memory ``vectors`` (m, d) on row ``[prefix, vectors, ids]``, whose first ``given`` ids are inputs only: per
    predicted position of ``positions`` (0: the first, ids[given]), the margin (target logit less the largest other)
    and the norm of its gradient with respect to the vectors."""
    embed = model.get_input_embeddings()
    memory = vectors.detach().clone().to(embed.weight.dtype).requires_grad_(True)
    with torch.no_grad():
        tokens = embed(torch.tensor(ids))
    row = torch.cat([prefix.to(memory.dtype), memory, tokens.to(memory.dtype)])[None]
    first = prefix.shape[0] + memory.shape[0] + given - 1  # the position that predicts ids[given]
    logits = model(inputs_embeds=row).logits[0, first : first + len(ids) - given].float()
    targets = torch.tensor(ids[given:])
    chosen = logits.gather(1, targets[:, None])[:, 0]
    others = logits.scatter(1, targets[:, None], float("-inf")).max(1).values
    margins = chosen - others
    out = []
    for j in positions:
        (grad,) = torch.autograd.grad(margins[j], memory, retain_graph=True)
        out.append({"position": j, "margin": float(margins[j].detach()), "gradient_norm": float(grad.norm())})
    return out


def measure(folder, positions: int, outcomes=None, done=frozenset(), model=None, tokenizer=None):
    """One record per in-flight row of ``folder`` whose (m, n, index, step) is not in ``done``: its step, best prefix,
    and the margin and its gradient's norm at the first predicted position and ``positions`` - 1 later ones."""
    from ut_peft.accessibility.sweep import rebuild_folder

    states = {key: store.read_inflight(folder, key) for key in sorted(store.inflight_keys(folder))}
    states = {key: state for key, state in states.items() if (*key, state.step) not in done}
    if not states:
        return
    config, model, tokenizer, source = rebuild_folder(folder, model, tokenizer)
    model.eval().requires_grad_(False)
    prefix = prefix_embeds(model, config.cram)
    ended = store.read_rows(outcomes) if outcomes is not None else {}
    for key, state in states.items():
        m, n, index = key
        ids = source.sequence(n, index, config.seed)
        given = config.cram.given_tokens
        predicted = len(ids) - given
        measured = margin_gradients(model, prefix, ids, state.vectors, given, spread_positions(predicted, positions))
        row = ended.get(key)
        yield {
            "folder": str(folder),
            "model": config.model,
            "m": m,
            "n": n,
            "index": index,
            "step": state.step,
            "best_prefix": state.best_prefix,
            "ended": None if row is None else {k: row.get(k) for k in ("accessible", "steps", "best_prefix")},
            "given_tokens": given,
            "positions": measured,
        }


def report(records: list[dict]) -> str:
    lines = [
        "| model | m, n, index | step | how it ended | first margin | first gradient norm | later gradient norm "
        "(median) | first / later | later right |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        first, later = r["positions"][0], r["positions"][1:]
        later_norm = median(p["gradient_norm"] for p in later) if later else float("nan")
        ended = r["ended"]
        how = (
            "-"
            if ended is None
            else ("crammed" if ended["accessible"] else f"failed, best prefix {ended['best_prefix']}")
        )
        right = sum(p["margin"] > 0 for p in later)
        lines.append(
            f"| {r['model']} | {r['m']}, {r['n']}, {r['index']} | {r['step']} | {how} | {first['margin']:.2f} | "
            f"{first['gradient_norm']:.3g} | {later_norm:.3g} | {first['gradient_norm'] / later_norm:.2f} | "
            f"{right} of {len(later)} |"
        )
    lines.append(
        "margin: the target's logit less the largest other logit at that position (positive: predicted right); "
        "gradient norm: of the margin with respect to the memory vectors, at the memory the run had trained"
    )
    return "\n".join(lines)


def main(argv=None, *, model=None, tokenizer=None) -> None:
    args = parse(argv)
    output = Path(args.output)
    records = harness.read_records(output)
    if not args.report_only:
        if args.folder is None or not (Path(args.folder) / "settings.json").is_file():
            raise SystemExit(f"{args.folder}: not a sweep folder (no settings.json); give one, or --report-only")
        done = frozenset((r["m"], r["n"], r["index"], r["step"]) for r in records)
        new = measure(args.folder, args.positions, args.outcomes, done, model, tokenizer)
        harness.keep_records(output, records, new)
    if not records:
        raise SystemExit(f"{output}: no records yet; run it on a folder with rows in flight first")
    print(report(records))


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", help="a sweep folder with rows in flight (inflight/)")
    parser.add_argument("--positions", type=int, default=12, help="the first prediction and this many - 1 later ones")
    parser.add_argument("--outcomes", help="a folder whose rows say how the snapshotted rows ended")
    parser.add_argument("--output", required=True, help="JSONL of records, appended to; reruns skip what it holds")
    parser.add_argument("--report-only", action="store_true", help="print the table from --output alone")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main()
