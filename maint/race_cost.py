"""The race check's cost over the golden suite: every variant and cost model checked plainly and with the race
check, back to back in one process (so both see the same machine load), with the seconds of each.

    python maint/race_cost.py [--case SUBSTR]
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", metavar="SUBSTR")
    args = ap.parse_args(argv)
    from maint.case_loader import discover, load_case
    from maint.lowered_checks import COST_MODEL_NAMES
    from tilelayout.passes.lowering.pipeline import check_numeric, reference_outputs
    warnings.simplefilter("ignore")
    cases = ROOT / "cases"
    total = {True: 0.0, False: 0.0}
    failures = []
    for name in discover(cases):
        module = load_case(cases, name)
        for variant in module.VARIANTS:
            if args.case and args.case not in f"{name}/{variant}":
                continue
            extents = (getattr(module, "EXTENTS", {}).get(variant) or [None])[0]
            func = module.VARIANTS[variant]()
            hand = getattr(module, "REFERENCE", {}).get(variant)
            tolerance = getattr(module, "TOLERANCE", {}).get(variant)
            expected = reference_outputs(func, hand, extents=extents)
            for model in COST_MODEL_NAMES:
                took = {}
                for race in (False, True):
                    start = time.perf_counter()
                    res = check_numeric(func, cost_model=model, expected=expected, tolerance=tolerance,
                                        extents=extents, race_check=race)
                    took[race] = time.perf_counter() - start
                    total[race] += took[race]
                    if not res.ok:
                        failures.append(f"{name}/{variant}/{model} race_check={race}: {res.message[:200]}")
                print(f"{name}/{variant}/{model}: plain {took[False]:.2f} s, race check {took[True]:.2f} s", flush=True)
    print(f"total: plain {total[False]:.1f} s, race check {total[True]:.1f} s, "
          f"ratio {total[True] / max(total[False], 1e-9):.2f}")
    print("\n".join(failures) if failures else "every check passes")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
