"""Do the step counts of accessible rows follow one law across m? The check the steps-informed estimate needs first.

The steps-informed estimate (``ut_peft.accessibility.stats.pooled_steps.fit_pooled_steps``; simulated by
``benchmarks/measurement_cost.py --designs pooled+steps``) assumes log(steps) = tau0 + kappa n / n_50(m) + sigma eps
for every accessible row, with tau0, kappa and sigma the same at every m. This script tests that on the real rows of
sweep folders (cap and patience as run; inferred rows left out):

- per m, n_50 from the pooled line of the outcomes alone (``fit_pooled``), r = n / n_50(m) for each accessible row,
  and the least-squares line log(steps) = tau0_m + kappa_m r (where the m has accessible rows at two lengths);
- the F test of one (tau0, kappa) for every m against one per m (``p``; the law is refused below 1%), and the
  residual standard deviation of each;
- the line from the outcomes alone and from outcomes and steps, their n_50 and standard errors side by side, and
  the latter's standard errors guarded by the rows' sandwich (``pooled.guarded_covariance``, as
  ``--pooled-steps-robust`` takes them), with the sandwich's slope standard error over the law's own: above 1, the
  rows scatter more about the law than it says (on real rows, the one check of that there is).

    python benchmarks/steps_information.py results/smollm2-135m/pooled-words

r uses the outcomes' n_50 as if known, so the test is somewhat too ready to refuse (it ignores that n_50's error);
with few rows at an m it says little, and the script prints how many rows each figure stands on.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ut_peft.accessibility import store  # noqa: E402
from ut_peft.accessibility.engine.rows import INFERRED  # noqa: E402
from ut_peft.accessibility.stats.pooled import Cells, fit_pooled, guarded_covariance  # noqa: E402
from ut_peft.accessibility.stats.pooled_steps import StepRows, fit_pooled_steps, steps_sandwich  # noqa: E402


def read_rows(folders) -> list[tuple[int, int, bool, int]]:
    """(m, n, accessible, steps) of every crammed row of the folders (each folder's rows as the store reads them)."""
    rows = []
    for folder in map(Path, folders):
        for (m, n, _), row in sorted(store.read_rows(folder).items()):
            if row.get("stop_reason") != INFERRED:
                rows.append((int(m), int(n), bool(row["accessible"]), int(row["steps"])))
    return rows


def law_check(rows) -> dict:
    """The per-m and shared least-squares laws of log(steps) on r = n / n_50(m) and the F test between them."""
    ms = sorted({m for m, *_ in rows})
    if len(ms) < 2:
        raise SystemExit(f"the check needs rows at two m at least (got m = {ms}): run the sweep further")
    cells = Cells.from_rows(*zip(*[(m, n, a) for m, n, a, _ in rows], strict=True))
    line = fit_pooled(cells, ms)
    crammed = [(m, n / line.n50(m), math.log(s)) for m, n, a, s in rows if a]
    per_m: dict[int, dict[str, float | None]] = {}
    rss_separate, params_separate = 0.0, 0
    for m in ms:
        at = np.array([(r, y) for mm, r, y in crammed if mm == m])
        if len(at) < 3 or np.unique(at[:, 0]).size < 2:
            per_m[m] = {"rows": len(at), "kappa": None, "tau0": None}
            if len(at):  # an m with one length still holds rows: only its own mean is free
                rss_separate += float(((at[:, 1] - at[:, 1].mean()) ** 2).sum())
                params_separate += 1
            continue
        kappa, tau0 = np.polyfit(at[:, 0], at[:, 1], 1)
        rss = float(((at[:, 1] - (tau0 + kappa * at[:, 0])) ** 2).sum())
        per_m[m] = {"rows": len(at), "kappa": float(kappa), "tau0": float(tau0), "sd": math.sqrt(rss / (len(at) - 2))}
        rss_separate += rss
        params_separate += 2
    everything = np.array([(r, y) for _, r, y in crammed])
    kappa, tau0 = np.polyfit(everything[:, 0], everything[:, 1], 1)
    rss_shared = float(((everything[:, 1] - (tau0 + kappa * everything[:, 0])) ** 2).sum())
    df1, df2 = params_separate - 2, len(everything) - params_separate
    p_value = None
    if df1 > 0 and df2 > 0 and rss_separate > 0:
        f = ((rss_shared - rss_separate) / df1) / (rss_separate / df2)
        p_value = float(stats.f.sf(f, df1, df2))
    crammed_ms, crammed_ns, crammed_steps = zip(*[(m, n, s) for m, n, a, s in rows if a], strict=True)
    steps = StepRows.from_rows(crammed_ms, crammed_ns, crammed_steps)
    joint = fit_pooled_steps(cells, steps, ms)
    row_ms, row_ns, row_accessible, row_steps = zip(*rows, strict=True)
    sandwich = steps_sandwich(joint, row_ms, row_ns, row_accessible, row_steps)
    guarded = dataclasses.replace(joint, covariance=guarded_covariance(joint.covariance, sandwich))
    return {
        "ms": ms,
        "per_m": per_m,
        "shared": {
            "kappa": float(kappa),
            "tau0": float(tau0),
            "sd": math.sqrt(rss_shared / max(1, everything.shape[0] - 2)),
        },
        "p_value": p_value,
        "line": line,
        "joint": joint,
        "guarded": guarded,
        "sandwich_slope_se_ratio": math.sqrt(max(0.0, float(sandwich[0, 0]))) / joint.slope_se(),
        "rows": len(rows),
        "crammed": len(everything),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="sweep folders (rows.jsonl and settings.json)")
    args = parser.parse_args(argv)
    result = law_check(read_rows(args.folders))
    print(f"{result['rows']} rows ({result['crammed']} accessible) at m = {result['ms']} of {', '.join(args.folders)}")
    print("| m | accessible rows | kappa_m | tau0_m | residual sd |")
    print("|---|---|---|---|---|")
    for m, e in result["per_m"].items():
        if e["kappa"] is None:
            print(f"| {m} | {e['rows']} | (needs 3 rows at 2 lengths) | | |")
        else:
            print(f"| {m} | {e['rows']} | {e['kappa']:.2f} | {e['tau0']:.2f} | {e['sd']:.2f} |")
    shared = result["shared"]
    print(f"| all | {result['crammed']} | {shared['kappa']:.2f} | {shared['tau0']:.2f} | {shared['sd']:.2f} |")
    p = result["p_value"]
    if p is None:
        print("one law for every m: not testable (an m with accessible rows at two lengths is missing)")
    else:
        verdict = "refused (p < 0.01): do not use the steps-informed estimate" if p < 0.01 else "not refused"
        print(f"one law for every m against one per m: F test p = {p:.3g}, {verdict}")
    line, joint, guarded = result["line"], result["joint"], result["guarded"]
    print("| estimate | slope (se) | intercept (se) | " + " | ".join(f"n_50({m}) (se)" for m in range(1, 6)) + " |")
    print("|---|---|---|" + "---|" * 5)
    for name, fit in (("outcomes", line), ("outcomes + steps", joint), ("outcomes + steps, guarded", guarded)):
        print(
            f"| {name} | {fit.slope:.2f} ({fit.slope_se():.2f}) | {fit.intercept:.2f} ({fit.intercept_se():.2f}) | "
            + " | ".join(f"{fit.n50(m):.1f} ({fit.n50_se(m):.2f})" for m in range(1, 6))
            + " |"
        )
    print(f"the rows' sandwich over the steps law's own slope standard error: {result['sandwich_slope_se_ratio']:.2f}")


if __name__ == "__main__":
    main()
