"""SASS opcode grouping of ``maint/sass_counts.py`` (what ``bench_codegen --peer`` prints), and, where nvcc and
cuobjdump are present, the counts of a small compiled kernel."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from maint.sass_counts import count_opcodes, cuobjdump, sass_counts  # noqa: E402


def test_opcodes_fall_into_their_groups():
    c = count_opcodes(["HMMA.16816.F32", "HGMMA.64x128x16.F32", "LDSM.16.M88.4", "LDSM.16.MT88.2", "STSM.16.M88.4",
                       "LDG.E.128", "LDG.E", "LDG.E.64.CONSTANT", "LDG.E.U16", "STG.E.128", "STG.E",
                       "LDGSTS.E.BYPASS.128", "UTMALDG.2D", "UTMASTG.2D", "BAR.SYNC.DEFER_BLOCKING", "SYNCS.ARRIVE",
                       "SHFL.BFLY", "LDL.64", "STL", "FFMA"])
    assert c["MMA"] == 2 and c["LDSM"] == 2 and c["STSM"] == 1
    assert (c["LDG128"], c["LDG64"], c["LDG32"]) == (1, 1, 2)      # a 16-bit load is counted as narrow (32)
    assert (c["STG128"], c["STG32"]) == (1, 1)
    assert c["LDGSTS"] == c["UTMALDG"] == c["UTMASTG"] == c["BAR"] == c["SYNCS"] == c["SHFL"] == 1
    assert c["LDL"] == c["STL"] == 1 and c["total"] == 20


KERNEL = r"""
extern "C" __global__ void __launch_bounds__(128) k(const float4* __restrict__ a, float4* __restrict__ b) {
  __shared__ float4 s[128];
  s[threadIdx.x] = a[threadIdx.x];
  __syncthreads();
  b[threadIdx.x] = s[127 - threadIdx.x];
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None or cuobjdump() is None, reason="needs nvcc and cuobjdump")
def test_a_compiled_kernel_is_counted(tmp_path):
    from maint.bench_codegen import compile_stats
    cubin = tmp_path / "k.cubin"
    stats = compile_stats(KERNEL, "sm_80", cubin=cubin)
    assert stats.clean
    c = sass_counts(cubin)
    assert c["LDG128"] == 1 and c["STG128"] == 1 and c["BAR"] == 1 and c["total"] > 3
