"""Print, per golden case that converts, the conversion inference chose and its cost next to staging the
same fragment by hand (a row-major shared tile, what TileLang users write), and the io ratio of every
fragment store to global memory with and without conversions (io-aware).

    python maint/conversions_report.py [--case SUBSTR]
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from maint.case_loader import discover, load_case  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="", help="only cases whose name contains this")
    args = ap.parse_args(argv)
    import tilelayout as tl
    from tilelayout.report import bandwidth_rows
    warnings.simplefilter("ignore")
    print("case/variant/model: conversion, kind, cost (B) vs hand-staged (B)")
    stores = []
    for name in discover(ROOT / "cases"):
        if args.case not in name:
            continue
        module = load_case(ROOT / "cases", name)
        for variant, build in module.VARIANTS.items():
            for model in ("register-count", "io-aware"):
                func = build()
                result = tl.infer_layouts(func, cost_model=model)
                for conv in result.conversions:
                    cost, hand = conv["cost"], conv["hand_staged"]
                    print(f"{name}/{variant}/{model}: {conv['dst']} <- {conv['src']}, {cost.kind}, {cost.mem} vs "
                          f"{hand.mem} ({cost.describe()})")
                if model != "io-aware":
                    continue
                try:
                    before = tl.infer_layouts(func, cost_model=model, conflicts="strict")
                except tl.LayoutError:
                    before = None
                after = {r["statement"].split(" <- ")[0]: r for r in bandwidth_rows(result) if r["access"] == "store"}
                for row in bandwidth_rows(before) if before is not None else []:
                    key = row["statement"].split(" <- ")[0]
                    if row["access"] == "store" and "ratio" in row and key in after and "ratio" in after[key]:
                        stores.append(f"{name}/{variant}: {row['statement']}: ratio {row['ratio']:.2f} -> "
                                      f"{after[key]['ratio']:.2f}")
    print("\nfragment stores to global (io-aware), without conversions -> with them")
    for line in stores:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
