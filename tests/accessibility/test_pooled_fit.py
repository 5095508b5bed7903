"""The pooled design and its estimate make the same choices (step counts or not, the steps law's check, the
sandwich), and a design's rules (designs.pooled_rules.PooledRules) are one object that refuses rules that cannot
work."""

import numpy as np

from ut_peft.accessibility.design import pooled_estimates


def _audited_rows(seed, kappa_by_m=(5.0, 4.0, 3.0), audit=0.25, per_point=40) -> dict:
    """Rows (m, n, index) -> row at m = 1, 3, 5 (n_50 = 20 m + 4, width 10%) under an early abandon with a random
    audit (a row that will fail is flagged with probability 0.9, one that will cram with 0.2), the accessible rows'
    log steps 3.5 + kappa n / n_50(m) + 0.3 eps with a kappa per m (``kappa_by_m``: one law across m or not)."""
    rng = np.random.default_rng(seed)
    rows, index = {}, 0
    for m, kappa in zip((1, 3, 5), kappa_by_m):
        mu = 20.0 * m + 4.0
        for n in (round(0.6 * mu), round(0.9 * mu), round(1.1 * mu)):
            p = 1 / (1 + np.exp(-(mu - n) / (0.1 * mu)))
            for _ in range(per_point):
                will_cram = bool(rng.random() < p)
                steps = max(1, int(np.exp(3.5 + kappa * n / mu + 0.3 * rng.standard_normal())))
                flagged = bool(rng.random() < (0.2 if will_cram else 0.9))
                audited = flagged and bool(rng.random() < audit)
                row = {"accessible": will_cram and (audited or not flagged), "steps": steps if will_cram else 2000}
                if flagged:
                    row.update(flagged_at=5, audited=audited, steps=row["steps"] if audited else 5)
                rows[(m, n, index)] = row
                index += 1
    return rows


def test_under_an_audit_a_refused_steps_law_leaves_the_outcomes_own_estimate_guarded_by_their_sandwich():
    """Where the steps law across m is refused, the estimate is the pseudo-outcomes' alone, their covariance guarded
    by the sandwich (as without the step counts at all, and as the design's stop judges it)."""
    rows = _audited_rows(0)
    refused = pooled_estimates(rows, [1, 3, 5], check_m=3, audit=0.25, steps=True, steps_law_alpha=0.05)
    assert refused is not None and not refused["steps_law"]["one_law"] and refused["steps"] is None
    outcomes_alone = pooled_estimates(rows, [1, 3, 5], check_m=3, audit=0.25)
    assert {k: v for k, v in refused.items() if k not in ("steps", "steps_law")} == outcomes_alone
