"""The whole lowering: inference -> tile ops -> partition -> vectorize -> TVM; CUDA source; CPU execution.

- ``lower(func, target)``: an IRModule ready for ``tvm.compile`` (target bound as the function attribute).
- ``cuda_source(func, target)``: the CUDA C TVM generates (no GPU needed).
- ``build_cpu(func)``: a callable running the lowered kernel on the CPU with numpy arrays (threads
  serialised, see ``serialize_threads``), so every lowering is checked numerically here.
- ``check_numeric(func, reference=None)``: run the lowered kernel and a reference on the same random
  inputs and compare every parameter. The reference is a numpy function when the case declares one,
  else the numpy interpreter of the unlowered program (``tilelayout.reference``, which shares no code with
  lowering). ``sequential_outputs`` gives a second, TVM-compiled sequential reference for cross-checks.

Case contract (used by ``maint/run.py --numeric`` through ``check_case``): a case module may define
``REFERENCE = {variant: fn}`` with ``fn(inputs: dict[name, np.ndarray]) -> dict[name, np.ndarray]``
giving the expected final value of the parameters it writes (parameters it does not return must come
back unchanged), and ``TOLERANCE = {variant: (rtol, atol)}`` to override the default comparison (exact
unless some result is only defined up to rounding, ``check_exactness``; dtype-based tolerances then).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import tvm
from tvm import tirx

from tilelayout.errors import ConfigError, MissingLaunchError, ReferenceFunctionError

from ..hardware import func_target, normalize_target
from ..ir_utils import module_func
from ..float_cancellation import keep_ieee_semantics
from ..thread_dims import fold_thread_dims, unfold_thread_dims
from .atomics import fence_shared_atomics
from .bounds_guards import guard_out_of_bounds
from .cpu_build import (CHECK_LLVM, REFERENCE_LLVM, CpuKernel, _compile, _cpu_compile, _name,  # noqa: F401
                        _numpy_dtype, _numpy_dtype_name, cpu_index_guard, device_index_rewrites)
from .loop_partition import LoweringError, partition_function
from .loop_vectorize import vectorize_function
from .lower_tile_ops import lower_tile_ops
from .pipeline_plan import plan_pipelines
from .race_report import build_race_checked, describe_races
from .serialize_threads import sequential_semantics, serialize_threads
from .software_pipeline import software_pipeline

__all__ = ["lower", "cuda_source", "build_cpu", "build_cpu_lowered", "build_reference_cpu", "check_numeric", "check_case", "reference_outputs",
           "sequential_outputs", "compare_outputs", "Expected", "random_inputs", "NumericResult", "CpuKernel", "compile_ptx"]


def _as_func(func) -> tirx.PrimFunc:
    func = module_func(func, LoweringError)
    if not isinstance(func, tirx.PrimFunc):
        raise TypeError(f"expected a tvm.tirx.PrimFunc, got {type(func).__name__}")
    return func


def _tile_loops(func, target, cost_model, infer: bool) -> tuple:
    """(function, folded thread dims) after tile-op lowering and the safe-memory guards: the program-level
    loops, before partitioning."""
    func = keep_ieee_semantics(func)         # NaN tests, float cancellations: before anything simplifies them
    from ..index_binds import inline_index_binds
    func = inline_index_binds(func)          # named indices: the passes see the expression, as if inline
    from ..hardware import check_block_threads, warn_target_features
    warn_target_features(target)
    from .loop_partition import thread_launch
    check_block_threads(thread_launch(fold_thread_dims(func)[0])[1], target, _name(func))
    if infer:
        from .from_inference import infer_layouts
        func = infer_layouts(func, target, cost_model).func
    func = plan_pipelines(func, target)      # num_stages loops: decided once, recorded on the loop
    func, dims = fold_thread_dims(func)      # threadIdx.y/z: lower over the linear thread id, then restore
    func = lower_tile_ops(func, target)
    return guard_out_of_bounds(func), dims   # safe global memory: guard what may leave its buffer


def safe_memory_guards(func, target=None) -> list:
    """The guards lowering gives an annotated function's global accesses (``bounds_guards.guard_records``),
    found without partitioning and vectorising: they are decided before."""
    from .bounds_guards import guard_records
    func = _as_func(func)
    return guard_records(_tile_loops(func, normalize_target(func_target(func, target)), None, False)[0])


def lower_func(func, target=None, cost_model=None, infer: bool = True, verify: bool = True) -> tirx.PrimFunc:
    """The lowered PrimFunc (see ``lower``); ``infer=False`` starts from an already annotated function."""
    target = normalize_target(func_target(_as_func(func), target))
    func, dims = _tile_loops(_as_func(func), target, cost_model, infer)
    func = partition_function(func, verify)
    func = vectorize_function(func, target)
    func = software_pipeline(func)           # multi-buffered tiles, cp.async prologue / steady state / drain
    from .index_guard import protect_indices
    from .loop_partition import thread_launch
    tx, threads = thread_launch(func)
    func = func.with_body(protect_indices(func.body, tx, threads))
    from .shared_liveness import keep_shared_alive
    from .uniform_branches import mark_uniform_branches
    from .unroll_registers import unroll_register_loops
    func = unroll_register_loops(func)       # every register index a constant: fragments stay in registers
    from .register_select import select_register_reads
    func = select_register_reads(func)       # the indices left at runtime: a select over constant slots
    from .merge_barriers import merge_barriers
    func = keep_shared_alive(mark_uniform_branches(fence_shared_atomics(func)))
    return unfold_thread_dims(merge_barriers(func), dims)       # one barrier where steps put several in a row


def lower(func, target=None, cost_model=None, infer: bool = True, verify: bool = True) -> tvm.IRModule:
    """inference -> lower tile ops -> partition -> vectorize; an IRModule ready for ``tvm.compile``."""
    target = normalize_target(func_target(_as_func(func), target))
    f = lower_func(func, target, cost_model, infer, verify).with_attr("target", target)
    return tvm.IRModule({_name(f): f})


def cuda_source(func, target=None, cost_model=None) -> str:
    """CUDA C of the lowered kernel (apache-tvm generates it without a GPU)."""
    target = normalize_target(func_target(_as_func(func), target))
    if target.kind.name != "cuda":
        raise ValueError(f"cuda_source needs a CUDA target, got {target}")
    return lowered_cuda_source(lower(func, target, cost_model), target)


def lowered_cuda_source(mod, target=None) -> str:
    """CUDA C of an already lowered module (``lower``'s result): TVM's whole CUDA build, no GPU needed. A build
    TVM stops raises ``LoweringError``."""
    mod = mod if isinstance(mod, tvm.IRModule) else tvm.IRModule({"main": mod})
    target = normalize_target(target if target is not None else func_target(next(iter(mod.functions.values()))))
    return _device_source(_compile(mod, target), mod)


def _device_source(ex, mod=None) -> str:
    for m in ex.mod.imports:
        src = m.inspect_source("cuda")
        if src:
            return src
    for gv, f in sorted(mod.functions.items(), key=lambda kv: str(kv[0])) if mod is not None else ():
        if isinstance(f, tirx.PrimFunc) and not _launches_threads(f):
            raise MissingLaunchError(
                f"kernel {gv.name_hint} launches no thread: its body has no T.launch_thread(\"threadIdx.x\", N) "
                f"(nor blockIdx / a thread_binding loop), so TVM builds it as host code and there is no CUDA "
                f"kernel; add `tx = T.launch_thread(\"threadIdx.x\", 128)` (the block's thread count) at the top "
                f"of its body")
    raise LoweringError("TVM produced no CUDA device module")


def _launches_threads(func) -> bool:
    """Whether ``func`` launches a GPU thread or block (a ``thread_extent`` attribute or a thread-bound loop)."""
    found = []

    def on_attr(n):
        if n.attr_key == "thread_extent":
            found.append(n)

    def on_for(f):
        if f.thread_binding is not None:
            found.append(f)

    from ..ir_utils import walk
    walk(func.body, [(tirx.AttrStmt, on_attr), (tirx.For, on_for)])
    return bool(found)


def compile_ptx(source: str, target=None) -> bytes:
    """Compile CUDA source to PTX with nvcc (raises FileNotFoundError when nvcc is absent)."""
    import shutil
    if shutil.which("nvcc") is None:
        raise FileNotFoundError("nvcc is not on PATH")
    import tvm.support.nvcc as nvcc
    target = normalize_target(target)
    arch = str(target.attrs.get("arch", "sm_90a"))
    with target:
        return bytes(nvcc.compile_cuda(source, target_format="ptx", arch=arch, compiler="nvcc"))


# --------------------------------------------------------------------------------------- CPU execution

def build_cpu(func, target=None, cost_model=None, infer: bool = True, verify: bool = True,
              race_check: bool = False) -> CpuKernel:
    """The lowered kernel (for ``target``'s vector widths) run on the CPU with threads serialised; with
    ``race_check`` instrumented (docs/race-check.md): a call that races raises ``RaceError``."""
    lowered = lower_func(func, target, cost_model, infer, verify)
    if race_check:
        return build_race_checked(lowered)
    return build_cpu_lowered(lowered)


def build_cpu_lowered(lowered) -> CpuKernel:
    """An already lowered PrimFunc (``lower_func``'s result, possibly edited) run on the CPU: the GPU's index
    rewriting, cp.async and TMA emulation (``emulate_async_copy``, ``emulate_tma``), then the threads serialised."""
    from .emulate_async_copy import emulate_async_copies
    from .emulate_tma import emulate_tma
    serial = serialize_threads(emulate_tma(emulate_async_copies(device_index_rewrites(lowered))))
    return _cpu_compile(cpu_index_guard(serial), _name(lowered))


def build_reference_cpu(func) -> CpuKernel:
    """The unlowered program's sequential semantics on the CPU (the layout-free reference)."""
    f = keep_ieee_semantics(_as_func(func))
    return _cpu_compile(cpu_index_guard(sequential_semantics(f)), _name(f), REFERENCE_LLVM)


# --------------------------------------------------------------------------------------- numeric check

def _concrete_shape(param, extents: dict | None) -> list:
    """A parameter's shape with its symbolic extents (plain variables) taken from ``extents`` (name -> int)."""
    shape = []
    for s in param.shape:
        if isinstance(s, (int, tirx.IntImm)):
            shape.append(int(s))
        elif isinstance(s, tirx.Var) and extents is not None and str(s.name) in extents:
            shape.append(int(extents[str(s.name)]))
        else:
            given = sorted(extents or {})
            raise ConfigError(f"parameter {param.name} has the symbolic extent {s}: give its value in extents= "
                              f"(given: {given or 'none'})")
    return shape


def random_inputs(func, seed: int = 0, extents: dict | None = None) -> dict:
    """Deterministic random contents for every buffer parameter, keyed by name; ``extents`` gives the values
    of symbolic extents (``{"m": 100}``) of a dynamic-shape kernel."""
    rng = np.random.default_rng(seed)
    out = {}
    for p in _as_func(func).params:
        if not tirx.is_buffer_var(p):
            continue
        shape, dtype = _concrete_shape(p, extents), str(p.dtype)
        if dtype.startswith(("float", "bfloat")):
            data = rng.standard_normal(shape).astype(np.float32).astype(_numpy_dtype(dtype))
        elif dtype == "bool":
            data = rng.integers(0, 2, shape).astype(bool)
        elif dtype.startswith("uint"):
            data = rng.integers(0, 16, shape).astype(dtype)
        else:
            data = rng.integers(-8, 8, shape).astype(dtype)
        out[str(p.name)] = data
    for name, values in _fixed_inputs(func).items():
        if name not in out:
            raise ConfigError(f"function attribute {FIXED_INPUTS_ATTR}: no buffer parameter named {name}")
        fixed = np.asarray(values).astype(out[name].dtype)
        if fixed.size != out[name].size:
            raise ConfigError(f"function attribute {FIXED_INPUTS_ATTR}: {name} has {out[name].size} elements, "
                              f"{fixed.size} values given")
        out[name] = fixed.reshape(out[name].shape)
    return out


#: function attribute {parameter name: values}: contents the numeric checks give those parameters instead of
#: random ones (index tensors, such as a grouped gemm's group offsets, whose random contents would mean nothing)
FIXED_INPUTS_ATTR = "tilelayout.numeric_inputs"


def _fixed_inputs(func) -> dict:
    attrs = _as_func(func).attrs
    if attrs is None or FIXED_INPUTS_ATTR not in attrs:
        return {}
    return {str(k): [float(v) if isinstance(v, float) else int(v) for v in vals]
            for k, vals in dict(attrs[FIXED_INPUTS_ATTR]).items()}


@dataclass
class NumericResult:
    ok: bool
    message: str
    max_error: dict = field(default_factory=dict)     # buffer -> max abs error
    exact: bool = True
    times: dict = field(default_factory=dict)         # lower_build_s, run_s (first call), warm_run_s, reference_s
    races: list = field(default_factory=list)         # race_report.Race: conflicting accesses the race check saw

    def __bool__(self) -> bool:
        return self.ok


_TOLERANCE = {"float64": (1e-9, 1e-9), "float32": (1e-4, 1e-4), "float16": (2e-2, 2e-2), "bfloat16": (5e-2, 5e-2)}


def _floating_reduction(func) -> bool:
    """Some result is defined only up to rounding (``check_exactness``): compare within a tolerance."""
    from .check_exactness import rounded_result
    return rounded_result(_as_func(func))


class Expected(dict):
    """Expected final parameter values; ``exact`` is False when they are only defined up to rounding (a float
    reduction, gemm or transcendental was evaluated), so a comparison needs a tolerance."""

    exact: bool = True


def reference_outputs(func, reference: Callable | None = None, seed: int = 0,
                      extents: dict | None = None) -> Expected:
    """Final value of every parameter according to ``reference`` (a numpy function of the inputs) or, by
    default, the independent numpy interpreter of the program (``tilelayout.reference``)."""
    func = _as_func(func)
    inputs = random_inputs(func, seed, extents)
    names = list(inputs)
    expected = Expected({n: inputs[n].copy() for n in names})
    if reference is not None:
        produced = reference({n: inputs[n].copy() for n in names})
        for n, v in _reference_arrays(reference, produced, names).items():
            if v.size != inputs[n].size:
                raise ReferenceFunctionError(f"the numpy reference {_fn_name(reference)} returned {n} with shape "
                                             f"{list(v.shape)}; the parameter has shape {list(inputs[n].shape)}")
            expected[n] = v.astype(inputs[n].dtype).reshape(inputs[n].shape)
        expected.exact = not _floating_reduction(func)
        return expected
    from tilelayout.reference import run_reference
    run = run_reference(func, inputs)
    expected.update(run.outputs)
    expected.exact = run.exact
    return expected


def _fn_name(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _reference_arrays(reference, produced, names: list) -> dict:
    """``produced`` checked to be ``{parameter name: array}`` (what a reference must return), as numpy arrays."""
    from collections.abc import Mapping
    who = f"the numpy reference {_fn_name(reference)}"
    if not isinstance(produced, Mapping):
        raise ReferenceFunctionError(f"{who} returned {type(produced).__name__}; it must return a dict "
                                     f"{{parameter name: expected final array}} (parameters: {names})")
    unknown = sorted(str(k) for k in produced if k not in names)
    if unknown:
        raise ReferenceFunctionError(f"{who} returned unknown buffers {unknown} (parameters: {names})")
    out = {}
    for n, v in produced.items():
        try:
            out[n] = np.asarray(v)
        except (TypeError, ValueError) as err:
            raise ReferenceFunctionError(f"{who} returned {n} as {type(v).__name__}, not an array ({err})") from None
        if out[n].dtype == object:
            raise ReferenceFunctionError(f"{who} returned {n} as {type(v).__name__}, not an array of numbers")
    return out


def sequential_outputs(func, seed: int = 0, extents: dict | None = None) -> Expected:
    """Final value of every parameter according to the unlowered program's sequential semantics compiled by
    TVM (``serialize_threads.sequential_semantics``): a second, layout-free reference that
    ``maint/run.py --numeric`` cross-checks against the numpy interpreter."""
    func = _as_func(func)
    inputs = random_inputs(func, seed, extents)
    names = list(inputs)
    want = [inputs[n].copy() for n in names]
    build_reference_cpu(func)(*want)
    out = Expected(zip(names, want))
    out.exact = not _floating_reduction(func)
    return out


def compare_outputs(got: dict, want: dict, exact: bool, tolerance: tuple | None = None) -> tuple:
    """(problems, max abs error per buffer) of ``got`` against ``want``. NaN never matches a number; NaN
    against NaN at the same place matches (numpy's ``equal_nan``), in exact and tolerance mode alike; an
    infinity matches only the same infinity."""
    errors, problems = {}, []
    for n in want:
        g, w = got[n], want[n]
        gf, wf = np.asarray(g).astype(np.float64), np.asarray(w).astype(np.float64)
        both_nan = np.isnan(gf) & np.isnan(wf)
        same = (gf == wf) | both_nan
        with np.errstate(invalid="ignore"):
            err = np.where(same, 0.0, np.abs(gf - wf))
        err = np.where(np.isnan(err), np.inf, err)
        errors[n] = float(err.max()) if err.size else 0.0
        if exact:
            bad = ~same
        else:
            rtol, atol = tolerance or _TOLERANCE.get(str(np.asarray(w).dtype), (0.1, 0.1))
            with np.errstate(invalid="ignore"):
                close = np.isfinite(gf) & np.isfinite(wf) & (err <= atol + rtol * np.abs(wf))
            bad = ~(same | close)
        if bad.any():
            first = tuple(int(x) for x in np.argwhere(bad)[0])
            problems.append(f"{n}: {int(bad.sum())} of {bad.size} elements differ (first at {list(first)}: got "
                            f"{gf[first]!r}, expected {wf[first]!r})")
    return problems, errors


def check_numeric(func, reference: Callable | None = None, target=None, cost_model=None, seed: int = 0,
                  tolerance: tuple | None = None, kernel: CpuKernel | None = None,
                  expected: dict | None = None, extents: dict | None = None,
                  race_check: bool = True) -> NumericResult:
    """Run the lowered kernel on the CPU and compare every parameter with the reference's
    (``expected``: precomputed ``reference_outputs`` for the same seed, to share between cost models;
    ``extents``: values of a dynamic-shape kernel's symbolic extents, which size its inputs). With
    ``race_check`` (the default, unless ``kernel`` is given) the kernel runs instrumented (``race_check``):
    two threads touching one global or shared element without a barrier between them, one writing, or an
    out-of-bounds access, fail the check by name whatever the values."""
    func = _as_func(func)
    inputs = random_inputs(func, seed, extents)
    names = list(inputs)
    t0 = time.perf_counter()
    if kernel is None and race_check:
        kernel = build_race_checked(lower_func(func, target, cost_model))
    kernel = kernel or build_cpu(func, target, cost_model)
    t1 = time.perf_counter()
    got = [inputs[n].copy() for n in names]
    run = getattr(kernel, "run", kernel)            # a race-checked kernel returns its races
    races = run(*got)
    races = races if run is not kernel else []
    t2 = time.perf_counter()
    run(*[inputs[n].copy() for n in names])          # again, warm (the first call includes LLVM's JIT)
    warm = time.perf_counter() - t2
    t2 = time.perf_counter()
    if expected is None:
        expected = reference_outputs(func, reference, seed, extents)
    t3 = time.perf_counter()
    exact = tolerance is None and getattr(expected, "exact", True) and not _floating_reduction(func)
    problems, errors = compare_outputs(dict(zip(names, got)), {n: expected[n] for n in names}, exact, tolerance)
    times = {"lower_build_s": t1 - t0, "run_s": t2 - t1 - warm, "warm_run_s": warm, "reference_s": t3 - t2}
    ok = not problems and not races
    msg = "match" + (" (exact)" if exact else " (within tolerance)") if ok else "; ".join(problems)
    if races:
        msg = describe_races(races, getattr(kernel, "total", None)) + ("" if not problems else f"; values: {msg}")
    return NumericResult(ok, msg, errors, exact, times, races)


def check_case(module, variant: str, cost_model=None, target=None, seed: int = 0,
               extents: dict | None = None) -> NumericResult:
    """``check_numeric`` for one case variant, honouring its REFERENCE / TOLERANCE declarations (and, for a
    dynamic-shape variant, the first of its EXTENTS unless ``extents`` is given)."""
    func = module.VARIANTS[variant]()
    reference = getattr(module, "REFERENCE", {}).get(variant)
    tolerance = getattr(module, "TOLERANCE", {}).get(variant)
    if extents is None and getattr(module, "EXTENTS", {}).get(variant):
        extents = module.EXTENTS[variant][0]
    return check_numeric(func, reference, target, cost_model, seed, tolerance, extents=extents)
