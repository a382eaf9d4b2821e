"""Converting loads into wider registers (``hardware.lanes_for_bits``, ``widening_load_bits``): an fp16 or
bf16 load into an fp32 fragment takes its lanes from the memory side (8: one 128-bit load), where the
statement does nothing else; every other statement keeps the widest-element cap. Lowered kernels run on the
CPU against numpy, and the 8-lane form compiles to registers (no stack frame) when nvcc is present."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import main_text  # noqa: E402
from maint.case_loader import load_case  # noqa: E402
from maint.lanes import vector_lanes  # noqa: E402
from tilelayout.passes.hardware import lanes_for_bits, widening_load_bits  # noqa: E402
from tilelayout.passes.lowering.pipeline import check_numeric, lower, lowered_cuda_source  # noqa: E402

SM80 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})


def _parse(text: str):
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx
    return tvm.script.from_source(text, extra_vars={"T": T, "Tx": Tx})


@pytest.mark.parametrize("accesses, want", [
    ([(16, False, False, "float16"), (32, True, True, "float32")], 16),          # fp16 global -> fp32 fragment
    ([(16, False, False, "bfloat16"), (32, True, True, "float32")], 16),
    ([(32, True, False, "float32"), (16, False, True, "float16")], None),        # narrowing store: not a load
    ([(8, False, False, "int8"), (16, True, True, "float16")], None),            # dequantisation: not float
    ([(8, False, False, "float8_e4m3fn"), (32, True, True, "float32")], None),   # float8 keeps its own cap
    ([(16, False, False, "float16"), (32, True, True, "float32"), (32, True, False, "float32")], None),
    ([(32, False, False, "float32"), (32, True, True, "float32")], None),        # same width: nothing widens
])
def test_which_statements_are_converting_loads(accesses, want):
    assert widening_load_bits(accesses) == want


def test_the_memory_side_sets_the_lanes_up_to_two_register_vectors():
    assert lanes_for_bits(128, [16, 32]) == 4
    assert lanes_for_bits(128, [16, 32], widening_from=16) == 8
    assert lanes_for_bits(128, [8, 32], widening_from=8) == 4        # 16 fp32 lanes would be four vectors
    assert lanes_for_bits(128, [32, 64], widening_from=32) == 4


@pytest.mark.parametrize("variant", ["fp16_to_fp32_128x128_t128", "bf16_to_fp32_64x256_t256"])
def test_register_count_loads_eight_lanes_and_matches_numpy(variant):
    module = load_case(ROOT / "cases", "mixed_dtype_copy")
    mod = lower(module.VARIANTS[variant](), SM80, "register-count")
    assert vector_lanes(mod, SM80)["A"] == 8
    res = check_numeric(module.VARIANTS[variant](), module.REFERENCE[variant], target=SM80,
                        cost_model="register-count")
    assert res.ok, res.message


SCALED = main_text('A: T.Buffer((128, 128), "float16"), B: T.Buffer((128, 128), "float32")', threads=128, body='''
    acc = T.alloc_buffer((128, 128), "float32", scope="local.fragment")
    for i in T.parallel(128):
        for j in T.parallel(128):
            acc[i, j] = T.Cast("float32", A[i, j]) * T.float32(2)
    Tx.copy(B[0:128, 0:128], acc[0:128, 0:128])
''')


def test_arithmetic_on_the_converted_lanes_keeps_its_own_cap():
    """float32 arithmetic over 8 lanes is one of the forms TVM's CUDA generator gets wrong: 4 lanes."""
    mod = lower(_parse(SCALED), SM80, "register-count")
    assert vector_lanes(mod, SM80)["A"] <= 4
    res = check_numeric(_parse(SCALED), lambda ins: {"B": ins["A"].astype(np.float32) * np.float32(2)}, target=SM80,
                        cost_model="register-count")
    assert res.ok, res.message


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_the_eight_lane_conversion_stays_in_registers():
    from maint.bench_codegen import compile_stats
    module = load_case(ROOT / "cases", "mixed_dtype_copy")
    source = lowered_cuda_source(lower(module.VARIANTS["fp16_to_fp32_128x128_t128"](), SM80, "register-count"),
                                 SM80)
    assert "*(uint4*)(A_ptr" in source
    stats = compile_stats(source, "sm_80")
    assert stats.clean, stats
