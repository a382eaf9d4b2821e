"""The golden cases that issue tensor-core instructions, as the CuTe oracle and the alignment check take them."""
from __future__ import annotations

from pathlib import Path

__all__ = ["tensor_core_case_variants"]

ROOT = Path(__file__).resolve().parent.parent


def tensor_core_case_variants(targets: tuple) -> list:
    """(label ``case/variant@arch``, kernel, arch) of every case variant with a ``Tx.gemm``, for each target.
    Variants whose kernels differ only in their target attribute (``sm80_x`` / ``sm90_x``) are taken once: lowered
    for the same target they are the same kernel."""
    import tvm_ffi
    from maint.case_loader import discover, load_case
    from tilelayout.passes.inference.frontend import GemmOp, build_op_graph
    cases = ROOT / "cases"
    seen, out = set(), []
    for name in discover(cases):
        if "gemm" not in (cases / f"{name}.py").read_text():
            continue
        module = load_case(cases, name)
        for variant, build in module.VARIANTS.items():
            func = build()
            key = (tvm_ffi.structural_hash(func.body), tuple(str(p) for p in func.params))
            if key in seen or not any(isinstance(op, GemmOp) for op in build_op_graph(func).ops):
                continue
            seen.add(key)
            out += [(f"{name}/{variant}@{arch}", func, arch) for arch in targets]
    return out
