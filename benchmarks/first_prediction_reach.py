"""How far can a memory move each prediction of a row? A mechanism check for first-token stalls.

    python benchmarks/first_prediction_reach.py results/gemma-3-270m/pooled-words-glove-v3 --m 3 --n 40 \\
        --output results/benchmarks/first_prediction_reach.jsonl
    python benchmarks/first_prediction_reach.py results/smollm2-135m/pooled-words-v7 --m 3 --n 40 \\
        --output results/benchmarks/first_prediction_reach.jsonl
    python benchmarks/first_prediction_reach.py --output results/benchmarks/first_prediction_reach.jsonl --report-only

Under the published protocol a Gemma-3-270M row that fails almost always fails at its first target token (a
first-token stall: best prefix 0, often at 93-99% teacher-forced accuracy), where SmolLM2-135M's rows at m = 3 and 5
never did. The first target is predicted at the given token's position (the BOS, after the memory); every later one
at a position after it. This asks how much the memory can move each of those predictions at all, before any
training: on the folder's own texts (its source, seed and the lengths given; index 0 up), ``--draws`` memories of
``m`` vectors are drawn at each of ``--scales`` (multiples of the std of the token embeddings as the model sees them,
so 1 is ut-peft's init and Gemma's published init, the unscaled table's std, is about 0.04), and at each predicted
position the predicted distributions of two draws are compared by their total variation distance (0: the memory
moved nothing there; 1: two draws predict disjoint tokens), averaged over the pairs of draws and the texts.

Two layouts: the folder's own (``[memory, given, t_1 ...]``, the published protocol's), and ``given-first``
(``[given, memory, t_1 ...]``, ut-peft's, the first target predicted from the memory's last position). A first
prediction that the memory moves far less than the later ones, in one layout and not the other, says where a stall
comes from: the position it is predicted at, not the text. Forward passes only (a few minutes of one model on
2 cores); each line of ``--output`` is one (folder, layout, scale) with its per-position distances, and a rerun of a
line already there is skipped.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path
from statistics import median

import harness
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ut_peft.accessibility.engine.forward import embedding_std, init_vectors, prefix_embeds  # noqa: E402
from ut_peft.accessibility.engine.sources import init_seed  # noqa: E402

LAYOUTS = ("memory-first", "given-first")


def total_variation(log_probs: torch.Tensor) -> torch.Tensor:
    """(draws, positions, vocab) log-probabilities -> (positions,) total variation distance between the
    distributions of two draws, averaged over every pair of draws."""
    probs = log_probs.double().exp()
    pairs = list(itertools.combinations(range(probs.shape[0]), 2))
    return torch.stack([0.5 * (probs[a] - probs[b]).abs().sum(-1) for a, b in pairs]).mean(0)


@torch.no_grad()
def prediction_log_probs(model, prefix: torch.Tensor, ids: list[int], memory: torch.Tensor, layout: str, given: int):
    """(draws, len(ids) - given, vocab) log-probabilities of every predicted token of a row whose first ``given``
    tokens are inputs only: ``[prefix, memory, ids]`` (memory-first) or ``[prefix, ids[:given], memory,
    ids[given:]]`` (given-first), one row per draw of ``memory`` (draws, m, d)."""
    embed = model.get_input_embeddings()
    tokens = embed(torch.tensor(ids)).to(memory.dtype)
    draws, m, _ = memory.shape
    if layout == "memory-first":
        pieces = [prefix.expand(draws, -1, -1), memory, tokens[None].expand(draws, -1, -1)]
        first = prefix.shape[0] + m + given - 1  # the position that predicts ids[given]
    else:
        lead, rest = tokens[:given], tokens[given:]
        pieces = [prefix.expand(draws, -1, -1), lead[None].expand(draws, -1, -1), memory]
        pieces.append(rest[None].expand(draws, -1, -1))
        first = prefix.shape[0] + given + m - 1
    logits = model(inputs_embeds=torch.cat(pieces, dim=1)).logits
    return torch.log_softmax(logits[:, first : first + len(ids) - given].float(), dim=-1)


def reach(folder, m: int, n: int, texts: int, draws: int, wanted, model=None, tokenizer=None):
    """One record per (layout, scale) of ``wanted``: the mean total variation distance at each predicted position of
    the folder's texts of length ``n`` (indices 0 to ``texts`` - 1) between ``draws`` memories of ``m`` vectors at
    that scale."""
    from ut_peft.accessibility.sweep import rebuild_folder

    config, model, tokenizer, source = rebuild_folder(folder, model, tokenizer)
    given = config.cram.given_tokens
    if given < 1:
        raise SystemExit(
            f"{folder}: its rows have no given token (given_tokens 0: the ut-peft protocol's rows open with their "
            "first predicted token); this check compares the given token's position with the memory's, so it needs "
            "a folder of the published protocol"
        )
    model.eval()
    std = embedding_std(model)
    prefix = prefix_embeds(model, config.cram)
    hidden = model.get_input_embeddings().weight.shape[1]
    dtype = next(model.parameters()).dtype
    sequences = [source.sequence(n, index, config.seed) for index in range(texts)]
    for layout, scale in wanted:
        per_text = []
        for index, ids in enumerate(sequences):
            # The engine's own init (randn(m, d) * std from a seeded generator), at this scale of the std.
            memory = torch.stack(
                [init_vectors(m, hidden, std * scale, init_seed(draw, m, n, index)) for draw in range(draws)]
            )
            log_probs = prediction_log_probs(model, prefix.to(dtype), ids, memory.to(dtype), layout, given)
            per_text.append(total_variation(log_probs))
        distances = torch.stack(per_text).mean(0).tolist()
        yield {
            "folder": str(folder),
            "model": config.model,
            "m": m,
            "n": n,
            "texts": texts,
            "draws": draws,
            "layout": layout,
            "scale": scale,
            "embedding_std": std,
            "given_tokens": given,
            "tv_by_position": distances,
        }


def report(records: list[dict]) -> str:
    """One table: per folder, layout and scale, the distance at the first predicted position, the median over the
    later ones, and their ratio."""
    lines = [
        "| model | m, n | layout | memory scale (x embedding std) | TV at the first prediction | TV at later ones "
        "(median) | first / later |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        first, later = r["tv_by_position"][0], median(r["tv_by_position"][1:])
        ratio = f"{first / later:.2f}" if later > 0 else "-"
        lines.append(
            f"| {r['model']} | {r['m']}, {r['n']} | {r['layout']} | {r['scale']:g} | {first:.3f} | {later:.3f} | "
            f"{ratio} |"
        )
    texts = sorted({(r["texts"], r["draws"]) for r in records})
    lines.append(
        "TV: total variation distance between the predicted distributions of two memory draws, averaged over "
        + "; ".join(f"{d * (d - 1) // 2} pairs of {d} draws and {t} texts" for t, d in texts)
    )
    return "\n".join(lines)


def _key(record: dict) -> tuple:
    return (str(Path(record["folder"])), record["m"], record["n"], record["texts"], record["draws"])


def main(argv=None, *, model=None, tokenizer=None) -> None:
    args = parse(argv)
    output = Path(args.output)
    records = harness.read_records(output)
    if not args.report_only:
        if args.folder is None:
            raise SystemExit("give a sweep folder of the published protocol, or --report-only to print the table")
        if not (Path(args.folder) / "settings.json").is_file():
            raise SystemExit(f"{args.folder}: not a sweep folder (no settings.json)")
        here = (str(Path(args.folder)), args.m, args.n, args.texts, args.draws)
        done = {(r["layout"], r["scale"]) for r in records if _key(r) == here}
        todo = [(layout, scale) for layout in LAYOUTS for scale in args.scales if (layout, scale) not in done]
        if todo:  # the model is loaded only when there is something to measure
            new = reach(args.folder, args.m, args.n, args.texts, args.draws, todo, model, tokenizer)
            harness.keep_records(output, records, new)
    if not records:
        raise SystemExit(f"{output}: no records yet; run it on a folder first")
    print(report(records))


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "folder", nargs="?", help="a sweep folder of the published protocol (its model, texts, layout)"
    )
    parser.add_argument("--m", type=int, default=3, help="memory vectors per row (default 3)")
    parser.add_argument(
        "--n", type=int, default=40, help="row length in tokens, the given token included (default 40)"
    )
    parser.add_argument("--texts", type=int, default=4, help="texts of the folder's source, indices 0 up (default 4)")
    parser.add_argument("--draws", type=int, default=6, help="memory draws per text and scale (default 6)")
    parser.add_argument(
        "--scales",
        type=float,
        nargs="+",
        default=[0.04, 1.0, 4.0],
        help="memory std as multiples of the token embeddings' std as the model sees them (default 0.04 1 4)",
    )
    parser.add_argument("--output", required=True, help="JSONL of records, appended to; reruns skip what it holds")
    parser.add_argument("--report-only", action="store_true", help="print the table from --output alone")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main()
