"""Per-token fp8 quantisation (TileLang's ``examples/cast`` per-token, per-128-column-group cast, ported).

Each block takes ``bm`` rows by one 128-column group of a float32 matrix: the row maximum of ``|x|`` (at
least 1e-4) gives the scale ``s = amax / 448``; ``x / s`` clamped to +-448 is converted to float8 e4m3 through
a fragment copy and stored, with the scales. TIRx has no absmax reduction, so ``|x|`` is taken in a nest
first (the TileLang twin is written the same way, so both sides infer one program). Pinned:

- in ``b8_g128_t128_pinned`` the user's layout of ``y`` (thread ``i // 2 * 32 + j % 32``, as the example
  annotates it, slots inferred) is kept, and every fragment and loop follows it: one layout for ``y``,
  ``y_abs``, ``y_q`` and ``y_q8`` (a difference would be a conversion), the row statistics ``amax`` and ``s``
  held by exactly the threads of their row;
- without the pin, inference chooses the same kind of plan on its own (tests compare it with TileLang's);
- the float32 -> e4m3 conversion rounds to nearest even and saturates as CUDA's does: the numeric check runs
  the lowered kernel on the CPU against a numpy quantiser written from the example's reference program.
"""
import ml_dtypes
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

import tilelayout as tl
from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90) gives the same layouts as ours in all three variants under both models:
b8_g128_t128_pinned keeps the pin (y thread `_i // 2 * 32 + _j % 32`, slot `_i % 2 * 4 + _j // 32`) and lays out
every other tile and loop the same (amax, s `_i // 2 * 32 + _rep`, replicate 32); b8_g128_t128 `_i * 16 + _j // 8`,
slot `_j % 8` (rows 16 threads wide, statistics replicate 16); b32_g128_t256 `_i * 8 + _j // 16`, slot `_j % 16`
under register-count, `_i % 8 * 32 + _j // 4`, slot `_i // 8 * 4 + _j % 4` under io-aware. Correct; we must
match."""


FP8_MAX = 448.0


def _quantize(row_blocks: int, groups: int, bm: int, group: int, threads: int, pin: bool):
    m, n = row_blocks * bm, groups * group

    @T.prim_func
    def kernel(X: T.Buffer((m, n), "float32"), X_fp8: T.Buffer((m, n), "float8_e4m3fn"),
               X_amax: T.Buffer((m, groups), "float32")):
        bx = T.launch_thread("blockIdx.x", row_blocks)
        by = T.launch_thread("blockIdx.y", groups)
        tx = T.launch_thread("threadIdx.x", threads)
        y = T.alloc_buffer((bm, group), "float32", scope="local.fragment")
        y_abs = T.alloc_buffer((bm, group), "float32", scope="local.fragment")
        amax = T.alloc_buffer((bm,), "float32", scope="local.fragment")
        s = T.alloc_buffer((bm,), "float32", scope="local.fragment")
        y_q = T.alloc_buffer((bm, group), "float32", scope="local.fragment")
        y_q8 = T.alloc_buffer((bm, group), "float8_e4m3fn", scope="local.fragment")
        Tx.copy(y[0:bm, 0:group], X[bx * bm:bx * bm + bm, by * group:by * group + group])
        for i in T.parallel(bm):
            for j in T.parallel(group):
                y_abs[i, j] = T.abs(y[i, j])
        Tx.max(amax[0:bm], y_abs[0:bm, 0:group], axes=[1])
        for i in T.parallel(bm):
            amax[i] = T.max(amax[i], T.float32(1e-4))
            s[i] = amax[i] / T.float32(FP8_MAX)
        for i in T.parallel(bm):
            for j in T.parallel(group):
                y_q[i, j] = T.min(T.max(y[i, j] / s[i], T.float32(-FP8_MAX)), T.float32(FP8_MAX))
        Tx.copy(y_q8[0:bm, 0:group], y_q[0:bm, 0:group])
        for i in T.parallel(bm):
            X_amax[bx * bm + i, by] = s[i]
        Tx.copy(X_fp8[bx * bm:bx * bm + bm, by * group:by * group + group], y_q8[0:bm, 0:group])

    if pin:     # the example's annotation: four row blocks of bm // 4 rows, one per warp, columns over the lanes
        kernel = tl.annotate_layouts(kernel, {"y": tl.Fragment((bm, group),
                                                               lambda i, j: (i // (bm // 4)) * 32 + j % 32)})
    return kernel


#: (row blocks, column groups, rows per block, group width, threads, pinned)
SHAPES = {
    "b8_g128_t128_pinned": (2, 2, 8, 128, 128, True),
    "b8_g128_t128": (2, 2, 8, 128, 128, False),
    "b32_g128_t256": (2, 2, 32, 128, 256, False),
}

VARIANTS = {name: (lambda s=shape: _quantize(*s)) for name, shape in SHAPES.items()}


def _reference(group: int):
    """The example's reference program in numpy: per row and 128-column group, amax = max |x| (at least 1e-4),
    codes = x * (448 / amax) rounded to e4m3, scales = amax / 448. The kernel divides by the float32 scale
    instead of multiplying by 448 / amax; that is computed here the kernel's way so the codes compare exactly."""
    def quantize(d):
        x = d["X"].astype(np.float32)
        m, n = x.shape
        tiles = x.reshape(m, n // group, group)
        amax = np.maximum(np.abs(tiles).max(axis=2), np.float32(1e-4)).astype(np.float32)
        scale = (amax / np.float32(FP8_MAX)).astype(np.float32)
        q = np.clip(tiles / scale[:, :, None], -FP8_MAX, FP8_MAX).astype(np.float32)
        return {"X_fp8": q.reshape(m, n).astype(ml_dtypes.float8_e4m3fn), "X_amax": scale}
    return quantize


REFERENCE = {name: _reference(shape[3]) for name, shape in SHAPES.items()}

_PIN = {"thread": "_i // 2 * 32 + _j % 32"}


def check(variant, model, result):
    buffers = result["buffers"]
    tiles = ("y", "y_abs", "y_q", "y_q8")
    for name in tiles + ("amax", "s"):
        _support.assert_valid_fragment(name, buffers[name])
    for name in tiles[1:]:
        assert np.array_equal(_support.thread_table(buffers[name]), _support.thread_table(buffers["y"])) and \
            np.array_equal(_support.index_table(buffers[name]), _support.index_table(buffers["y"])), \
            f"{name} is laid out unlike y: {buffers[name]} vs {buffers['y']}"
    if variant.endswith("_pinned"):
        i, j = np.indices(tuple(buffers["y"]["input_shape"]))
        assert np.array_equal(_support.thread_table(buffers["y"])[..., 0], i // 2 * 32 + j % 32), \
            f"y must keep the pin {_PIN['thread']}: {buffers['y']}"
    for key, loop, per_row in _support.row_statistic_loops(result, "y", ("amax", "s")):
        if per_row:
            _support.assert_owned(key, loop, "amax", buffers["amax"], lambda i: (i,), write=True)
            _support.assert_owned(key, loop, "s", buffers["s"], lambda i: (i,))
            continue
        _support.assert_owned(key, loop, "y", buffers["y"], lambda i, j: (i, j))
        written = "y_abs" if "#" not in key else "y_q"
        _support.assert_owned(key, loop, written, buffers[written], lambda i, j: (i, j), write=True)
