"""Compiling lowered kernels with TVM, and the CPU build of a kernel whose threads were serialised.

The CPU build must compute the addresses the GPU computes: ``device_index_rewrites`` applies the index
rewriting TVM's GPU pipeline does before codegen, ``cpu_index_guard`` hides from the CPU build's flattening the
indices it would rewrite wrongly. ``CpuKernel`` runs the result with numpy arrays. Both the numeric check
(``pipeline``) and the race-checked build (``race_report``) compile through here.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import tirx

from tilelayout.errors import TileLayoutError

from ..ir_utils import walk
from .cpu_fp8 import cpu_fp8
from .index_guard import protect_indices
from .loop_partition import LoweringError
from .shared_alignment import compile_module

__all__ = ["CpuKernel", "REFERENCE_LLVM", "CHECK_LLVM", "device_index_rewrites", "cpu_index_guard"]


def _name(func) -> str:
    attrs = func.attrs
    if attrs is not None and "global_symbol" in attrs:
        return str(attrs["global_symbol"])
    return "main"


def _compile(mod, target):
    try:
        return compile_module(mod, target)
    except TileLayoutError:
        raise
    except Exception as err:  # never let a raw TVM error reach the user
        lines = [l for l in str(err).splitlines() if l.strip()]
        raise LoweringError(f"TVM could not compile the lowered kernel for {target}: "
                            f"{lines[-1] if lines else type(err).__name__}") from None


class CpuKernel:
    """A compiled CPU function; call with numpy arrays (updated in place and returned)."""

    def __init__(self, ex, func, name: str):
        self._ex, self._func, self.name = ex, func, name
        # symbolic extents (dynamic shapes) stay as their variable's name and are bound from the arrays given
        self.params = [(str(p.name), [int(s) if isinstance(s, (int, tirx.IntImm)) else str(s) for s in p.shape],
                        str(p.dtype)) for p in func.params if tirx.is_buffer_var(p)]

    def __call__(self, *arrays):
        if len(arrays) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arrays ({', '.join(n for n, _, _ in self.params)}), "
                            f"got {len(arrays)}")
        tensors, bound = [], {}
        for arr, (name, shape, dtype) in zip(arrays, self.params):
            if not isinstance(arr, np.ndarray):
                raise TypeError(f"{self.name}: argument {name} must be a numpy array, got {type(arr).__name__}")
            for k, s in enumerate(shape):
                if isinstance(s, str) and k < arr.ndim:
                    bound.setdefault(s, arr.shape[k])
            want = [bound.get(s, s) if isinstance(s, str) else s for s in shape]
            if list(arr.shape) != want or str(arr.dtype) != _numpy_dtype_name(dtype):
                raise ValueError(f"{self.name}: argument {name} must be {dtype}{want}, got {arr.dtype}{list(arr.shape)}"
                                 + (f" (with {', '.join(f'{k} = {v}' for k, v in bound.items())})" if bound else ""))
            tensors.append(tvm.runtime.tensor(np.ascontiguousarray(arr)))
        self._ex[self.name](*tensors)
        for arr, t in zip(arrays, tensors):
            arr[...] = t.numpy()
        return arrays


def _numpy_dtype_name(dtype: str) -> str:
    return str(_numpy_dtype(dtype))


def _numpy_dtype(dtype: str):
    if dtype.startswith(("float8_", "bfloat16", "float4_", "float6_")):
        import ml_dtypes
        name = {"bfloat16": "bfloat16"}.get(dtype, dtype)
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(dtype)


#: LLVM options of the layout-free reference: at the default -O3, LLVM can spend minutes constant-folding its
#: long scalar loops (a constant fill reduced over 4096 elements took 130 s); -O1 builds them in milliseconds
REFERENCE_LLVM = {"kind": "llvm", "opt-level": 1}

#: LLVM options of the serialised kernels: -O3's compile time grows exponentially with the length of a
#: guarded max chain (an all-reduce combining 32 partials for 33 threads, ``if t < 32``, fuzz seed 1684: 0.07 s
#: at 20 terms, 0.8 s at 24, minutes at 32); -O2 builds it in milliseconds. The check is about values, not speed.
CHECK_LLVM = {"kind": "llvm", "opt-level": 2}


def _cpu_compile(func, name: str, target=CHECK_LLVM, disabled_pass: tuple = ()) -> CpuKernel:
    attrs = func.attrs
    if attrs is not None and "target" in attrs:
        func = func.without_attr("target") if hasattr(func, "without_attr") else func.with_attr("target", None)
    mod = tvm.IRModule({name: cpu_fp8(func)})
    # TVM's LLVM backend cannot vectorise sub-byte/fp8 legalisation; vector semantics equal scalar ones
    scalar = any(str(b.dtype).startswith(("float8_", "float6_", "float4_")) for b in _buffers(func))
    with tvm.transform.PassContext(config={"tirx.disable_vectorize": scalar}, disabled_pass=list(disabled_pass)):
        ex = _compile(mod, tvm.target.Target(target) if isinstance(target, dict) else target)
    return CpuKernel(ex, func, name)


def _buffers(func) -> list:
    out = [p for p in func.params if tirx.is_buffer_var(p)]
    walk(func.body, [((tirx.AllocBuffer, tirx.DeclBuffer), lambda a: out.append(a.buffer))])
    return out


def device_index_rewrites(func) -> tirx.PrimFunc:
    """The lowered kernel after the buffer-index rewriting TVM's GPU pipeline does before codegen (buffer
    flattening, whose iter-map simplification rewrites every index, then simplification): the CPU run must
    execute the index arithmetic the GPU executes. apache-tvm 0.27 rewrites ``((tx + 28) % 128 + 100) // 128``
    to ``(tx + 100) % 128 // 128`` (always 0) when ``tx`` ranges over [0, 128); serialising the threads first
    would hide such rewrites from the check."""
    from tvm import s_tir
    mod = tvm.IRModule({"main": func})
    mod = tvm.transform.Sequential([tirx.transform.FlattenBuffer(), s_tir.transform.StmtSimplify()])(mod)
    return mod["main"]


def cpu_index_guard(func) -> tirx.PrimFunc:
    """The serialised kernel with every buffer index the CPU build's flattening would rewrite wrongly hidden
    behind a ``Let`` (``index_guard``), so that the CPU computes the addresses the GPU computes. Serialising
    makes new indices: a warp shuffle's lane (a value on the GPU) indexes an exchange array, and each
    per-thread array gains the thread as a leading index. apache-tvm 0.27 flattens
    ``((t + 32) // 7 * 7 + (t + 4) % 7 + 25) % 32`` over ``t < 32`` to ``(t + 21) % 32`` (fuzz seeds 1553 and
    1567: right CUDA, wrong CPU results). Simplified first, as the build does before flattening, so that the
    check sees the forms flattening will see."""
    from tvm import s_tir
    func = s_tir.transform.StmtSimplify()(tvm.IRModule({"main": func}))["main"]
    return func.with_body(protect_indices(func.body))
