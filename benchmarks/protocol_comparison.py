"""The published protocol against ut-peft's on the same sequences, and the init scale against the learning rate.

Every variant crams the same sequences and predicts the same tokens: the published layout is
``[memory, BOS, t_1 .. t_{L-2}]`` (the BOS given, t_1 .. t_{L-1} predicted) and ut-peft's is
``[BOS, memory, t_1 .. t_{L-2}]`` (the BOS before the memory, the same t_1 .. t_{L-1} predicted). Variants:

  published            published layout, init std of the embedding weight table, lr 1e-2, tf-accuracy decision
  published-scaled     published layout, init at the std of the embeddings as the model uses them (x sqrt(d)
                       on Gemma), lr 1e-2
  published-scaled-lr  as above with lr multiplied by the same factor (so the step is the same relative size)
  ut-peft              ut-peft's layout and init, greedy-confirmed decision, lr 1e-2 as given (ut-peft's protocol
                       now multiplies it by the embedding scale, as published-scaled-lr does: CramConfig.lr_scale)

Rows go to ``--output`` as JSONL (one per variant and sequence; a rerun skips finished ones, so an interrupted
run resumes), then a table: accessible fraction, mean steps of the crammed rows, greedy agreement of the decision,
greedy misses. For a tokenizer that adds no BOS (SmolLM2's) the first text token is given in the published layout;
the ut-peft variant then puts the tokenizer's ``bos_token`` before the memory and gives the first text token too,
so both still predict the same tokens.

    python benchmarks/protocol_comparison.py --model gemma-3-270m --source words --length 10 \\
        --num-sequences 4 --max-steps 300 --output results/protocols/gemma-words-L10.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch

import ut_peft
from ut_peft.accessibility.engine.cram import cram  # noqa: E402
from ut_peft.accessibility.engine.forward import embedding_std, embedding_weight_std  # noqa: E402
from ut_peft.accessibility.engine.jobs import CramConfig, CramJob
from ut_peft.accessibility.engine.protocol import PublishedSequences, cram_settings, special_prefix_ids
from ut_peft.accessibility.engine.sources import init_seed, make_source
from ut_peft.accessibility.store import append_row

VARIANTS = ("published", "published-scaled", "published-scaled-lr", "ut-peft")


def variant_config(
    name: str, base: CramConfig, special: list[int], scale: float, bos: int | None = None
) -> CramConfig:
    published = cram_settings("published", base)
    if name == "published":
        return published
    if name == "published-scaled":
        return dataclasses.replace(published, init_std="embedding")
    if name == "published-scaled-lr":
        return dataclasses.replace(published, init_std="embedding", lr=base.lr * scale)
    if name == "ut-peft":  # the BOS goes before the memory (the tokenizer's bos_token when it adds none itself)
        prefix = special or ([bos] if bos is not None else [])
        # The lr as given, as the committed rows of results/protocols were crammed (before ut-peft's protocol scaled
        # it with the embeddings, lr_scale "embedding": on Gemma that is published-scaled-lr's step).
        return dataclasses.replace(base, prefix_ids=tuple(prefix), given_tokens=0 if special else 1, lr_scale="none")
    raise ValueError(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")


def variant_ids(name: str, sequence: list[int], special: list[int]) -> list[int]:
    """The published sequence carries the special tokens; ut-peft puts them in the prefix instead."""
    return sequence[len(special) :] if name == "ut-peft" else sequence


def read_done(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a torn last line of a killed run: that row is crammed again
            pass
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| variant | L | m | accessible | mean steps (crammed) | decision = greedy | greedy misses | row-steps |",
        "|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r["variant"], r["length"], r["m"]) for r in rows}, key=lambda k: (VARIANTS.index(k[0]), k[1:]))
    for variant, length, m in keys:
        group = [r for r in rows if (r["variant"], r["length"], r["m"]) == (variant, length, m)]
        crammed = [r["steps"] for r in group if r["accessible"]]
        mean = f"{sum(crammed) / len(crammed):.0f}" if crammed else "-"
        agree = sum(r["accessible"] == r["greedy_exact"] for r in group)
        lines.append(
            f"| {variant} | {length} | {m} | {sum(r['accessible'] for r in group)}/{len(group)} | {mean} | "
            f"{agree}/{len(group)} | {sum(r['greedy_misses'] for r in group)} | "
            f"{sum(r['steps'] + 1 for r in group)} |"
        )
    return "\n".join(lines)


def main(args):
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    done = read_done(output)
    if args.report_only:
        print(table(done))
        return
    torch.set_num_threads(args.threads) if args.threads else None
    model, tokenizer = ut_peft.load_model_and_tokenizer(args.model)
    special = special_prefix_ids(tokenizer)
    source = PublishedSequences(
        make_source(args.source, tokenizer, nested_text=True, default_word_list="wordfreq"), special
    )
    scale = embedding_std(model) / embedding_weight_std(model)
    base = CramConfig(
        max_steps=args.max_steps,
        patience=args.patience,
        lr=args.lr,
        batch_size=args.batch_size,
        autocast=args.autocast,
    )
    finished = {(r["variant"], r["length"], r["m"], r["index"]) for r in done}
    for variant in args.variants:
        config = variant_config(variant, base, special, scale, bos=tokenizer.bos_token_id)
        jobs = []
        for length in args.lengths:
            for m in args.ms:
                for index in range(args.num_sequences):
                    if (variant, length, m, index) in finished:
                        continue
                    sequence = source.sequence(length, index, args.seed)
                    jobs.append(
                        CramJob(
                            key=(length, m, index),
                            ids=variant_ids(variant, sequence, special),
                            m=m,
                            seed=init_seed(args.seed, m, length, index),
                        )
                    )
        started = time.perf_counter()
        for result in cram(model, jobs, config):
            length, m, index = result.job.key
            append_row(
                output,
                {
                    "variant": variant,
                    "model": args.model,
                    "source": args.source,
                    "length": length,
                    "m": m,
                    "index": index,
                    "accessible": result.accessible,
                    "greedy_exact": result.greedy_exact,
                    "steps": result.steps,
                    "stop_reason": result.stop_reason,
                    "tf_accuracy": result.tf_accuracy,
                    "best_accuracy": result.best_accuracy,
                    "greedy_misses": result.greedy_misses,
                    "lr": config.lr,
                    "init_std": config.init_std,
                    "max_steps": config.max_steps,
                    "autocast": config.autocast,
                    "init_scale_ratio": scale,
                    "best_accuracy_at": {str(k): v for k, v in result.best_accuracy_at.items()},
                },
            )
            print(
                f"{variant} L={length} m={m} #{index}: {result.stop_reason} after {result.steps} steps "
                f"(tf {result.tf_accuracy:.2f})",
                flush=True,
            )
        if jobs:
            print(f"{variant}: {len(jobs)} sequences in {time.perf_counter() - started:.0f} s", flush=True)
    print(table(read_done(output)))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--source", default="words", help="words (the wordfreq list) or text (nested pydoc text)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[10], help="published lengths L (count the BOS)")
    parser.add_argument("--ms", type=int, nargs="+", default=[1])
    parser.add_argument("--num-sequences", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--patience", type=int, default=500)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--autocast", default="none", choices=["auto", "bf16", "fp16", "none"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--output", required=True, help="JSONL file of rows (resumed when it exists)")
    parser.add_argument("--report-only", action="store_true", help="print the table of the rows --output holds")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
