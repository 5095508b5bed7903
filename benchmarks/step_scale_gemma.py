"""Gemma's embedding scale against AdamW's absolute step: the init's scale and the lr's, on the same rows.

Gemma multiplies its token embeddings by sqrt(d) inside the embedding module, so ut-peft's init (the std of the
embeddings as the model uses them) is 25.3x the table's own std on Gemma-3-270M, while AdamW moves a coordinate by
about lr a step whatever its size. Each variant crams the same random-GloVe-word rows with the same init seeds under
ut-peft's layout (the BOS before the memory, m = 1, float32, one thread), cap and patience both ``--cap``:

  embedding         init at the scaled std, lr as given (ut-peft's protocol before ``CramConfig.lr_scale``)
  weight            init at the table's std (the published init), lr as given
  embedding*S       init at the scaled std, lr times S (S = 25.3 on Gemma-3-270M: the step scaled with the init)

Each variant prints one JSON line: the rows crammed, their steps and best teacher-forced accuracies. ``embedding*S``
scales the lr only; ``lr_scale="embedding"`` (ut-peft's default since) also divides weight decay (0.01) and eps
(1e-8) by S, which moves no row measurably here. The records of docs/accessibility.md's table:

    python benchmarks/step_scale_gemma.py --cap 300 --lengths 9 --rows 8 \\
        --variants embedding weight 'embedding*25.3'          # results/benchmarks/step_scale_gemma_n9.log
    python benchmarks/step_scale_gemma.py --cap 300 --lengths 16 --rows 6 \\
        --variants 'embedding*25.3' embedding weight          # results/benchmarks/step_scale_gemma_n16.log
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from importlib import resources
from typing import cast

import torch

from ut_peft.accessibility.engine.cram import cram
from ut_peft.accessibility.engine.forward import embedding_std, embedding_weight_std
from ut_peft.accessibility.engine.jobs import CramConfig, CramJob
from ut_peft.accessibility.engine.sources import GLOVE_WORDS_FILE
from ut_peft.models import load_model_and_tokenizer


def draw_texts(tokenizer, words: list[str], lengths: list[int], rows: int, seed: int) -> dict[int, list[list[int]]]:
    """``rows`` texts of each length: 5n words drawn with replacement, joined by spaces, tokenized without special
    tokens, cut to n tokens (the paper's construction, one generator for every length in turn)."""
    rng = random.Random(seed)
    texts: dict[int, list[list[int]]] = {}
    for n in lengths:
        texts[n] = [
            tokenizer(" ".join(rng.choice(words) for _ in range(5 * n)), add_special_tokens=False)["input_ids"][:n]
            for _ in range(rows)
        ]
    return texts


def variant_config(variant: str, cap: int, bos: int) -> CramConfig:
    """``init_std`` or ``init_std*S`` (lr times S), the step as given (lr_scale "none"): the variants are defined
    by their init and lr alone."""
    init, _, factor = variant.partition("*")
    config = CramConfig(max_steps=cap, patience=cap, batch_size=8, prefix_ids=(bos,), init_std=init, lr_scale="none")
    return dataclasses.replace(config, lr=config.lr * float(factor)) if factor else config


def main(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    start = time.time()
    model, tokenizer = load_model_and_tokenizer(args.model)
    model.eval()
    print(
        "loaded",
        round(time.time() - start),
        "s",
        model.dtype,
        "scaled std",
        embedding_std(model),
        "weight std",
        embedding_weight_std(model),
        flush=True,
    )
    # The packaged list split on any whitespace, as the recorded logs drew their words (the sources split on
    # newlines only): the same rows as those logs.
    data = resources.files("ut_peft.accessibility").joinpath("data").joinpath(GLOVE_WORDS_FILE).read_text("utf-8")
    texts = draw_texts(tokenizer, data.split(), args.lengths, args.rows, args.seed)
    for n in args.lengths:
        for variant in args.variants:
            config = variant_config(variant, args.cap, tokenizer.bos_token_id)
            jobs = [CramJob(key=i, ids=ids, m=1, seed=1000 + i) for i, ids in enumerate(texts[n])]
            began = time.time()
            # The jobs' keys are their rows' positions (ints); CramJob takes any key.
            results = sorted(cram(model, jobs, config), key=lambda result: cast(int, result.job.key))
            print(
                json.dumps(
                    {
                        "n": n,
                        "init_std": variant,
                        "lr": config.lr,
                        "crammed": f"{sum(r.accessible for r in results)}/{len(results)}",
                        "steps": [r.steps for r in results],
                        "best": [round(r.best_accuracy, 3) for r in results],
                        "secs": round(time.time() - began),
                    }
                ),
                flush=True,
            )


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--cap", type=int, default=300, help="step cap, and patience")
    parser.add_argument("--lengths", type=int, nargs="+", default=[9], help="tokens a row (predicted)")
    parser.add_argument("--rows", type=int, default=8, help="rows of each length")
    parser.add_argument("--seed", type=int, default=7, help="the texts' generator")
    parser.add_argument(
        "--variants", nargs="+", default=["embedding", "weight", "embedding*25.3"], help="embedding, weight, INIT*S"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
