"""Local ``evaluate`` metrics for the algorithmic tasks (``evaluate.load`` would need the Hub).

Both tasks store causal-LM ``labels`` in transformers' convention: the logits at position t are scored against
``labels[t + 1]``, and -100 marks a position the task does not score.
"""

from __future__ import annotations

from collections import Counter

import datasets
import evaluate
import torch

IGNORE_INDEX = -100


class ScoredTokenAccuracy(evaluate.Metric):
    """Accuracy over the positions a task scores (reference != -100).

    Returns ``accuracy`` (over scored tokens) and ``sequence_accuracy`` (sequences whose scored tokens are all
    right). Predictions and references are aligned lists of token ids, one list per sequence.
    """

    def _info(self):
        return evaluate.MetricInfo(
            description="Token accuracy at the positions an algorithmic task scores, and whole-sequence accuracy.",
            citation="",
            inputs_description="predictions, references: one list of token ids per sequence; references of -100 "
            "are not scored.",
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("int64")),
                    "references": datasets.Sequence(datasets.Value("int64")),
                }
            ),
        )

    def _compute(self, predictions, references):
        scored = correct = sequences = sequences_right = 0
        for pred, ref in zip(predictions, references):
            if len(pred) != len(ref):
                raise ValueError(f"a prediction has {len(pred)} tokens but its reference has {len(ref)}")
            hits = [p == r for p, r in zip(pred, ref) if r != IGNORE_INDEX]
            if not hits:
                continue
            scored += len(hits)
            correct += sum(hits)
            sequences += 1
            sequences_right += all(hits)
        if scored == 0:
            raise ValueError("no scored positions: every reference is -100")
        return {
            "accuracy": correct / scored,
            "sequence_accuracy": sequences_right / sequences,
            "scored_tokens": scored,
        }


def aligned_predictions(logits: torch.Tensor, labels: torch.Tensor) -> tuple[list[list[int]], list[list[int]]]:
    """Greedy predictions and references aligned the way the causal-LM loss aligns them (logits[t] vs labels[t+1])."""
    predictions = logits[:, :-1].argmax(dim=-1)
    references = labels[:, 1:]
    return predictions.tolist(), references.tolist()


def majority_baseline(dataset) -> dict:
    """Accuracy of always answering the most frequent scored label (per hop count when the rows have ``k``).

    The floor a trained model must beat: k-hop answers are often "does-not-exist" on short strings.
    """

    def best_share(rows):
        counts = Counter(label for row in rows for label in row["labels"] if label != IGNORE_INDEX)
        if not counts:
            raise ValueError(
                "majority_baseline: the dataset has no scored label (every label is -100, or there are no rows); "
                "pass the task's held-out set, whose answers are scored"
            )
        return max(counts.values()) / sum(counts.values())

    rows = dataset.to_list()
    result = {"accuracy": best_share(rows)}
    if rows and "k" in rows[0]:
        ks = sorted({r["k"] for r in rows})
        result["per_k"] = {str(k): best_share([r for r in rows if r["k"] == k]) for k in ks}
    return result


__all__ = ["IGNORE_INDEX", "ScoredTokenAccuracy", "aligned_predictions", "majority_baseline"]
