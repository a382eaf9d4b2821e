"""Named index expressions (``passes/index_binds.py``): ``y = by * 64 + i`` vectorises like the same index
written inline, and every kernel that names something else (a loaded value, a scalar updated twice) keeps
its meaning. Every kernel here runs lowered on the CPU against numpy."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx

from conftest import main_text
from tilelayout.passes.index_binds import inline_index_binds
from tilelayout.passes.lowering.loop_vectorize import VECTOR_WIDTH_KEY
from tilelayout.passes.lowering.pipeline import check_numeric, lower_func

SM80 = {"kind": "cuda", "arch": "sm_80"}


def _parse(text: str):
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx
    return tvm.script.from_source(text, extra_vars={"T": T, "Tx": Tx})


ADD = main_text('A: T.Buffer((256, 256), "DT"), B: T.Buffer((256, 256), "DT"), C: T.Buffer((256, 256), "DT")',
                threads=128, blocks=(4, 4), body='''
    for i in T.parallel(64):
        for j in T.parallel(64):
            BODY
''')

NAMED = '''y: T.int32 = by * 64 + i
            x: T.int32 = bx * 64 + j
            C[y, x] = A[y, x] + B[y, x]'''
INLINE = "C[by * 64 + i, bx * 64 + j] = A[by * 64 + i, bx * 64 + j] + B[by * 64 + i, bx * 64 + j]"
CHAINED = '''row: T.int32 = by * 64
            y: T.int32 = row + i
            x: T.int32 = bx * 64 + j
            C[y, x] = A[y, x] + B[y, x]'''


def _add(body: str, dtype: str = "float32"):
    return _parse(ADD.replace("BODY", body).replace("DT", dtype))


def _add_ref(inputs: dict) -> dict:
    return {"C": inputs["A"] + inputs["B"]}


def _widths(func) -> list:
    out: list = []
    tvm_ffi.structural_walk(func.body, (tirx.For, lambda f: out.append(int(f.annotations[VECTOR_WIDTH_KEY]))
                                        if VECTOR_WIDTH_KEY in f.annotations else None))
    return out


@pytest.mark.parametrize("dtype, lanes", [("float32", 4), ("float16", 8)])
@pytest.mark.parametrize("body", [NAMED, CHAINED], ids=["named", "chained"])
def test_named_indices_vectorise_like_inline_ones_and_match_numpy(body, dtype, lanes):
    named, inline = lower_func(_add(body, dtype), SM80), lower_func(_add(INLINE, dtype), SM80)
    assert _widths(named) == _widths(inline) == [lanes], (_widths(named), _widths(inline))
    res = check_numeric(_add(body, dtype), _add_ref, target=SM80)
    assert res.ok, res.message


def test_the_names_are_gone_before_inference():
    func = inline_index_binds(_add(NAMED))
    allocs: list = []
    tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, allocs.append))
    assert not allocs, "the one-element name buffers must be substituted away"
    assert "by * 64 + i" in func.script()


BIND_REGION = main_text('A: T.Buffer((256, 128), "float32"), B: T.Buffer((256, 128), "float32")',
                        threads=128, blocks=4, body='''
    row0 = T.bind(bx * 64)
    frag = T.alloc_buffer((64, 128), "float32", scope="local.fragment")
    Tx.copy(frag[0:64, 0:128], A[row0:row0 + 64, 0:128])
    for i in T.parallel(64):
        for j in T.parallel(128):
            frag[i, j] = frag[i, j] * T.float32(2)
    Tx.copy(B[row0:row0 + 64, 0:128], frag[0:64, 0:128])
''')


def test_a_bound_tile_offset_is_substituted_and_matches_numpy():
    func = _parse(BIND_REGION)
    binds: list = []
    tvm_ffi.structural_walk(inline_index_binds(func).body, (tirx.Bind, binds.append))
    assert not binds
    res = check_numeric(func, lambda ins: {"B": ins["A"] * np.float32(2)}, target=SM80)
    assert res.ok, res.message


UPDATED = main_text('A: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")', threads=128, body='''
    for i in T.parallel(64):
        for j in T.parallel(64):
            y: T.int32 = i
            y = (y + 1) % 64
            C[i, j] = A[y, j]
''')

LOADED = main_text('A: T.Buffer((64, 64), "int32"), C: T.Buffer((64, 64), "int32")', threads=128, body='''
    for i in T.parallel(64):
        for j in T.parallel(64):
            v: T.int32 = A[i, j] % 64
            A[i, j] = 0
            C[i, j] = v
''')


def test_a_scalar_written_twice_is_not_a_name():
    func = _parse(UPDATED)
    assert inline_index_binds(func).same_as(func)
    res = check_numeric(func, lambda ins: {"C": np.roll(ins["A"], -1, axis=0)}, target=SM80)
    assert res.ok, res.message


def test_a_loaded_value_is_not_an_index_expression():
    func = _parse(LOADED)
    assert inline_index_binds(func).same_as(func), "moving a load past the store to A would change the result"
    res = check_numeric(func, lambda ins: {"C": ins["A"] % 64, "A": np.zeros_like(ins["A"])}, target=SM80)
    assert res.ok, res.message
