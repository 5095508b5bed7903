"""Monte Carlo estimate of the decoder cells: the share of the representation space each token's decision owns.

A point is sampled uniformly in a support (the ball of the measured radius, or the per-coordinate box of the
measured hidden states), sent through the model's output path, and counted for the token it decodes to.
Sampling and the logits are chunked (over points and over the vocabulary) and counts are integers, so
10^7-10^8 samples over a 262k vocabulary run in bounded memory; each chunk is one batched matrix product.

Points are drawn on the CPU from the seed's generator (the same points whatever the device: the published figures'
draws are unchanged) and moved to where the output head is, which decides them and keeps the counts until a
checkpoint. Cells are counted over every head row (a padding row can win a decision); the per-token decay draws
sequences of the ``vocab_size`` real tokens only (ids below it), since the bound counts texts.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from .output_path import OutputPath

METHODS = ("argmax", "voronoi")


# --------------------------------------------------------------------------------------------------- supports
@dataclass
class BallSupport:
    """Uniform points in the ball of ``radius`` around ``center`` (the origin by default)."""

    hidden_size: int
    radius: float
    center: torch.Tensor | None = None

    def __post_init__(self):
        if not (self.radius > 0 and math.isfinite(self.radius)):
            raise ValueError(f"the ball radius must be a positive finite number, got {self.radius}")
        if self.hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {self.hidden_size}")

    name = "ball"

    def sample(
        self, n: int, generator: torch.Generator, dtype=torch.float32, device: torch.device | str | None = None
    ) -> torch.Tensor:
        """``n`` points, drawn where ``generator`` is (a CPU generator: the same points on any machine), then moved
        to ``device`` (where the head that decides them is; None: left where drawn)."""
        direction = torch.randn(n, self.hidden_size, generator=generator, dtype=dtype)
        direction /= direction.norm(dim=1, keepdim=True)
        # Radius law of a uniform ball: P(|x| <= t) = (t / r)^d.
        scale = self.radius * torch.rand(n, 1, generator=generator, dtype=dtype) ** (1.0 / self.hidden_size)
        points = direction * scale
        points = points if self.center is None else points + self.center.to(points.device, dtype)
        return points if device is None else points.to(device)


@dataclass
class BoxSupport:
    """Uniform points in the box ``low <= x <= high`` (per coordinate)."""

    low: torch.Tensor
    high: torch.Tensor

    def __post_init__(self):
        self.low, self.high = torch.as_tensor(self.low).flatten(), torch.as_tensor(self.high).flatten()
        if self.low.shape != self.high.shape:
            raise ValueError(f"box low and high differ in shape: {tuple(self.low.shape)} vs {tuple(self.high.shape)}")
        if not bool((self.high >= self.low).all()):
            raise ValueError("box high must be >= low in every coordinate")

    name = "box"

    @property
    def hidden_size(self) -> int:
        return self.low.numel()

    def sample(
        self, n: int, generator: torch.Generator, dtype=torch.float32, device: torch.device | str | None = None
    ) -> torch.Tensor:
        """``n`` points, drawn where ``generator`` is, then moved to ``device`` (as :meth:`BallSupport.sample`)."""
        u = torch.rand(n, self.hidden_size, generator=generator, dtype=dtype)
        low, high = self.low.to(u.device), self.high.to(u.device)
        points = low.to(dtype) + u * (high - low).to(dtype)
        return points if device is None else points.to(device)


def supports_from_stats(stats) -> dict:
    """The ball and box supports of an accessibility ``SupportStats`` (``measure_support``'s result)."""
    hidden_size = stats.low.numel()
    return {"ball": BallSupport(hidden_size, float(stats.radius)), "box": BoxSupport(stats.low, stats.high)}


# --------------------------------------------------------------------------------------------------- statistics
def wilson_interval(counts: torch.Tensor, n: int, z: float = 1.96) -> tuple[torch.Tensor, torch.Tensor]:
    """Wilson score interval of binomial proportions ``counts / n`` (valid near 0, where most shares are)."""
    p = counts.double() / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * torch.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (centre - half).clamp(min=0.0), (centre + half).clamp(max=1.0)


def entropy_nats(counts: torch.Tensor) -> float:
    n = counts.sum().item()
    p = counts[counts > 0].double() / n
    return float(-(p * p.log()).sum())


@dataclass
class CellEstimate:
    """Counts of sampled points per decoded token, and the statistics users read from them.

    ``counts`` has one entry per head row (padding rows too: they can win a decision); ``vocab_size`` is the
    number of real tokens, ids 0 .. vocab_size - 1 (None: every row), over which the per-token decay draws texts.
    """

    method: str
    support: str
    counts: torch.Tensor  # (head rows,) int64
    num_samples: int
    checkpoints: dict = field(default_factory=dict)  # {n: counts at n samples}, for the convergence check
    seconds: float = 0.0
    z: float = 1.96
    disagreements: int | None = None  # points where argmax and Voronoi decide differently (both methods run)
    vocab_size: int | None = None  # real tokens (a state saved before it was recorded: None, every row)
    # Points drawn per chunk: with the seed it decides which points are drawn, so the counts (None: a state saved
    # before it was recorded).
    chunk_size: int | None = None

    def __post_init__(self):
        if self.vocab_size is None:
            self.vocab_size = self.head_rows
        elif not 1 <= int(self.vocab_size) <= self.head_rows:
            raise ValueError(
                f"vocab_size must be between 1 and the {self.head_rows} head rows the counts cover, got "
                f"{self.vocab_size}"
            )
        self.vocab_size = int(self.vocab_size)

    @property
    def text_tokens(self) -> int:
        """``vocab_size`` as ``__post_init__`` settles it: always a count (None given means every head row)."""
        assert self.vocab_size is not None  # noqa: S101 - set in __post_init__
        return self.vocab_size

    @property
    def head_rows(self) -> int:
        """Cells counted: one per row of the output head, padding rows included."""
        return self.counts.numel()

    def padding_share(self) -> float:
        """Share of the samples decided to a padding row (ids >= ``vocab_size``): space no text's token owns."""
        return float(self.counts[self.vocab_size :].sum()) / self.num_samples

    @property
    def shares(self) -> torch.Tensor:
        return self.counts.double() / self.num_samples

    def intervals(self) -> tuple[torch.Tensor, torch.Tensor]:
        return wilson_interval(self.counts, self.num_samples, self.z)

    def entropy(self) -> float:
        """Plug-in entropy of the cell shares, in nats (biased low when many cells are unobserved)."""
        return entropy_nats(self.counts)

    def entropy_miller_madow(self) -> float:
        observed = int((self.counts > 0).sum())
        return self.entropy() + (observed - 1) / (2 * self.num_samples)

    def effective_tokens(self) -> float:
        """exp(entropy): the number of equal cells with the same entropy (|V| if the cells were uniform)."""
        return math.exp(self.entropy())

    def top(self, k: int = 20) -> list[dict]:
        low, high = self.intervals()
        k = min(k, self.head_rows)
        values, ids = torch.topk(self.counts, k)
        return [
            {
                "token_id": int(i),
                "count": int(c),
                "share": float(c) / self.num_samples,
                "ci_low": float(low[i]),
                "ci_high": float(high[i]),
            }
            for c, i in zip(values, ids)
        ]

    def log_shares(self, estimate: str = "jeffreys") -> torch.Tensor:
        """ln of each row's share. Most tokens of a large vocabulary are never hit, so the plain estimate
        (``plugin``) has ln 0 = -inf; ``jeffreys`` uses (c + 1/2) / (N + R/2) over the R head rows (the cells
        the samples fall in), ``upper`` the Wilson upper limit (larger shares: a bound computed from them stays an
        upper bound)."""
        if estimate == "plugin":
            return self.shares.log()
        if estimate == "jeffreys":
            return ((self.counts.double() + 0.5) / (self.num_samples + 0.5 * self.head_rows)).log()
        if estimate == "upper":
            return self.intervals()[1].log()
        raise ValueError(f"estimate must be 'plugin', 'jeffreys' or 'upper', got {estimate!r}")

    def median_product_decay(
        self, ks=(1, 2, 4, 8, 16, 32, 64), *, draws: int = 20000, estimate: str = "jeffreys", seed: int = 0
    ) -> list[dict]:
        """Per-token decay of the median product of k cell shares, against ln|V|.

        For k tokens drawn uniformly from the ``vocab_size`` real tokens (a random text: padding rows are in
        none), the product of their cell shares is the share of (per-position) representation space that decodes
        to that sequence; with equal cells it is |V|^-k. Returns, for each k, ``decay = -ln(median product) / k``
        and its ratio to ln|V| (> 1: a typical sequence's cells are smaller than uniform ones).
        """
        log_p = self.log_shares(estimate)[: self.vocab_size]
        g = torch.Generator().manual_seed(seed)
        out = []
        for k in ks:
            ids = torch.randint(0, self.vocab_size, (draws, int(k)), generator=g)
            median = float(log_p[ids].sum(dim=1).median())
            decay = -median / k
            out.append({"k": int(k), "decay": decay, "ratio_to_ln_vocab": decay / math.log(self.text_tokens)})
        return out

    def mean_log_share_decay(self, estimate: str = "jeffreys") -> float:
        """The k -> infinity limit of the median decay: -mean over the real tokens of ln share."""
        return float(-self.log_shares(estimate)[: self.vocab_size].mean())

    def convergence(self, top_k: int = 10) -> dict:
        """Shares of the final top tokens at each checkpoint (N/4, N/2, N), with the total-variation distance of
        each checkpoint's distribution to the final one and the largest |change| in units of the final CI
        half-width (about 1 or less when the estimate has settled)."""
        ids = torch.topk(self.counts, min(top_k, self.head_rows)).indices
        low, high = self.intervals()
        half = ((high - low) / 2)[ids].clamp(min=1e-300)
        final = self.shares
        rows = []
        for n, counts in sorted(self.checkpoints.items()):
            p = counts.double() / n
            rows.append(
                {
                    "num_samples": int(n),
                    "top_shares": [float(x) for x in p[ids]],
                    "total_variation_to_final": float(0.5 * (p - final).abs().sum()),
                    "max_change_in_half_widths": float(((p[ids] - final[ids]).abs() / half).max()),
                }
            )
        return {"token_ids": [int(i) for i in ids], "checkpoints": rows}

    def summary(self, top_k: int = 20, decay_ks=(1, 2, 4, 8, 16, 32, 64)) -> dict:
        # Tokens are the vocab_size ids a text can hold: a padded head's padding rows are no token, so counting them
        # (observed or not) over the head's rows put "observed tokens" and its fraction off |V|. They are counted
        # apart; without padding rows (vocab_size == head_rows) both figures are as before.
        observed = int((self.counts[: self.text_tokens] > 0).sum())
        observed_padding = int((self.counts[self.text_tokens :] > 0).sum())
        return {
            "method": self.method,
            "support": self.support,
            "num_samples": self.num_samples,
            "vocab_size": self.vocab_size,
            "head_rows": self.head_rows,
            "padding_share": self.padding_share(),
            "observed_tokens": observed,
            "observed_padding_rows": observed_padding,
            "disagreement_fraction": None if self.disagreements is None else self.disagreements / self.num_samples,
            "unobserved_fraction": 1 - observed / self.text_tokens,
            "seconds": self.seconds,
            "samples_per_second": self.num_samples / self.seconds if self.seconds else None,
            "entropy_nats": self.entropy(),
            "entropy_miller_madow_nats": self.entropy_miller_madow(),
            "effective_tokens": self.effective_tokens(),
            "ln_vocab": math.log(self.text_tokens),
            "top": self.top(top_k),
            "median_product_decay": {
                est: self.median_product_decay(decay_ks, estimate=est) for est in ("jeffreys", "upper")
            },
            "mean_log_share_decay": {est: self.mean_log_share_decay(est) for est in ("jeffreys", "upper")},
            "convergence": self.convergence(),
        }


# --------------------------------------------------------------------------------------------------- estimator
def default_chunks(
    vocab_size: int, chunk_size: int | None, vocab_chunk: int | None, max_logits: int = 2**24
) -> tuple[int, int]:
    """Chunk sizes whose logits block (points x vocabulary rows) stays under ``max_logits`` floats (64 MiB), unless
    ``vocab_chunk`` is given or ``chunk_size`` alone exceeds it (a block then holds one vocabulary row per point)."""
    chunk_size = chunk_size or 4096
    # No floor above 1 row: a floor (it was 1024) breaks the bound for chunk_size > max_logits / floor.
    vocab_chunk = vocab_chunk or max(1, min(vocab_size, max_logits // chunk_size))
    return int(chunk_size), int(min(vocab_chunk, vocab_size))


def estimate_cells(
    path: OutputPath,
    support,
    num_samples: int,
    *,
    methods=("argmax",),
    chunk_size: int | None = None,
    vocab_chunk: int | None = None,
    seed: int = 0,
    checkpoints=(0.25, 0.5),
    progress: bool = True,
    z: float = 1.96,
) -> dict[str, CellEstimate]:
    """Sample ``num_samples`` points of ``support`` and count the token each decodes to under each method.

    ``methods``: ``argmax`` (the greedy decision through the real output path) and/or ``voronoi`` (nearest head
    row, the published method); both share one matrix product per chunk. Counts are also kept at the
    ``checkpoints`` fractions of ``num_samples`` for the convergence check. Deterministic given ``seed``,
    ``chunk_size`` and ``checkpoints``: a chunk is cut at each checkpoint, and the points drawn depend on where the
    draws are cut, so other checkpoints draw other points (``vocab_chunk`` changes no draw). The draws are left so
    (not made independent of the checkpoints) because that would change the points behind the published figures.
    Returns {method: CellEstimate}.
    """
    num_samples = int(num_samples)
    if num_samples < 1:
        raise ValueError(f"num_samples must be a positive integer, got {num_samples}")
    if support.hidden_size != path.hidden_size:
        raise ValueError(
            f"the support has dimension {support.hidden_size} but the output head expects "
            f"{path.hidden_size}; measure the support on the same model"
        )
    rows = path.head_rows
    chunk_size, vocab_chunk = default_chunks(rows, chunk_size, vocab_chunk)
    marks = sorted({max(1, min(num_samples, int(round(f * num_samples)))) for f in checkpoints} - {num_samples})
    # A CPU generator: the seed gives the same points whatever device decides them.
    generator = torch.Generator().manual_seed(seed)
    # Counted where the head decides (no copy per chunk), brought to the CPU at each checkpoint and at the end.
    counts = {m: torch.zeros(rows, dtype=torch.long, device=path.device) for m in methods}
    saved: dict[str, dict] = {m: {} for m in methods}
    disagreements = 0
    start, done = time.perf_counter(), 0
    with tqdm(
        total=num_samples, desc=f"cells ({support.name})", unit="pt", unit_scale=True, disable=not progress
    ) as bar:
        while done < num_samples:
            # A chunk never crosses a checkpoint, so checkpoint counts are exact.
            stop = min([done + chunk_size, num_samples] + [m for m in marks if m > done])
            # float32 whatever the head's dtype: uniform draws rounded to bf16 leave the ball and take a few
            # hundred values per coordinate.
            points = support.sample(stop - done, generator, dtype=torch.float32, device=path.device)
            decided = path.decide(points, methods=methods, vocab_chunk=vocab_chunk)
            for m in methods:
                counts[m] += torch.bincount(decided[m], minlength=rows)
                if stop in marks:
                    saved[m][stop] = counts[m].to("cpu", copy=True)
            if len(decided) == 2:
                disagreements += int((decided["argmax"] != decided["voronoi"]).sum())
            bar.update(stop - done)
            done = stop
    seconds = time.perf_counter() - start
    final = {m: c.cpu() for m, c in counts.items()}
    return {
        m: CellEstimate(
            method=m,
            support=support.name,
            counts=final[m],
            num_samples=num_samples,
            checkpoints={**saved[m], num_samples: final[m]},
            seconds=seconds,
            z=z,
            disagreements=disagreements if len(methods) == 2 else None,
            vocab_size=path.vocab_size,
            chunk_size=chunk_size,
        )
        for m in methods
    }


def agreement(a: CellEstimate, b: CellEstimate) -> dict:
    """How far two cell estimates (e.g. argmax vs Voronoi on the same samples) are apart."""
    pa, pb = a.shares, b.shares
    return {
        "total_variation": float(0.5 * (pa - pb).abs().sum()),
        "top1_same": int(a.counts.argmax()) == int(b.counts.argmax()),
    }
