"""Local ``evaluate`` metrics for the algorithmic tasks (``evaluate.load`` would need the Hub).

Both tasks store causal-LM ``labels`` in transformers' convention: the logits at position t are scored against
``labels[t + 1]``, and -100 marks a position the task does not score.
"""

from __future__ import annotations

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
            features=datasets.Features({"predictions": datasets.Sequence(datasets.Value("int64")),
                                        "references": datasets.Sequence(datasets.Value("int64"))}),
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
        return {"accuracy": correct / scored, "sequence_accuracy": sequences_right / sequences,
                "scored_tokens": scored}


def aligned_predictions(logits: torch.Tensor, labels: torch.Tensor) -> tuple[list[list[int]], list[list[int]]]:
    """Greedy predictions and references aligned the way the causal-LM loss aligns them (logits[t] vs labels[t+1])."""
    predictions = logits[:, :-1].argmax(dim=-1)
    references = labels[:, 1:]
    return predictions.tolist(), references.tolist()


__all__ = ["IGNORE_INDEX", "ScoredTokenAccuracy", "aligned_predictions"]
