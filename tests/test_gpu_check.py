"""maint/gpu_check.py without a GPU: the gemm work it divides by time is counted exactly, every variant is lowered
for its own target, and --offline runs the attention and gemm cases (fp8 included) end to end."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import kernel_warnings  # noqa: E402
from maint import gpu_check  # noqa: E402


def test_gemm_flops_counts_every_block_and_loop_iteration():
    from cases import flash_attention as fa, gemm_fp8, gemm_tile
    # causal, seq 128 in 64-row blocks: block 0 runs 1 K/V iteration, block 1 runs 2; two gemms of 64x64x64 each
    assert gpu_check.gemm_flops(fa.VARIANTS["sm80_d64_b64x64_t128_causal"]()) == 3 * 2 * 2 * 64 ** 3
    assert gpu_check.gemm_flops(fa.VARIANTS["sm80_d64_b64x64_t128"]()) == 4 * 2 * 2 * 64 ** 3
    assert gpu_check.gemm_flops(gemm_tile.VARIANTS["m128n128k32_t128"]()) == 2 * 128 * 128 * 32
    assert gpu_check.gemm_flops(gemm_fp8.VARIANTS["sm90a_e4m3_ss_m64n128k64_t128"]()) == 2 * 64 * 128 * 64
    from cases import elementwise_copy
    assert gpu_check.gemm_flops(elementwise_copy.VARIANTS["fp16_128x128_t128"]()) == 0
    # a grid of ceildiv(m, 64) blocks: the count depends on m, so none is given (it raised a TypeError)
    from cases import dequant_gemm, dynamic_tiles
    assert gpu_check.gemm_flops(dynamic_tiles.VARIANTS["gemm_m_64x64x32_t128"]()) is None
    # two blocks of a 64x64 tile, four K steps of 64
    assert gpu_check.gemm_flops(dequant_gemm.VARIANTS["sm80_b64x64x64_s2_t128"]()) == 2 * 4 * 2 * 64 ** 3


def test_k_loop_gemms_count_each_iteration():
    import kernels_mma as K
    assert gpu_check.gemm_flops(K.gemm(64, 128, 128, bk=32)) == 4 * 2 * 64 * 128 * 32


def test_targets_of_variants_and_of_the_device():
    from cases import gemm_fp8, gemm_tile
    assert str(gpu_check.variant_target(gemm_fp8.VARIANTS["sm89_e4m3_m64n64k64_t128"]()).attrs["arch"]) == "sm_89"
    assert str(gpu_check.variant_target(gemm_tile.VARIANTS["m64n64k64_t128"]()).attrs["arch"]) == "sm_90a"
    assert str(gpu_check.device_target(9, 0).attrs["arch"]) == "sm_90a"        # wgmma needs the "a" features
    assert str(gpu_check.device_target(8, 9).attrs["arch"]) == "sm_89"


def test_without_a_gpu_the_check_says_so_and_passes(capsys, monkeypatch):
    monkeypatch.setattr(gpu_check, "gpu_present", lambda: False)
    assert gpu_check.main([]) == 0
    assert "no CUDA GPU present" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["gemm_fp8/sm90a_e5m2_rs", "flash_attention/sm80_d64_b64x64_t128_causal",
                                  "dequant_gemm/sm80_b64x64x64"])
def test_offline_runs_gemm_and_attention_variants(case, tmp_path, capsys):
    out = tmp_path / "records.json"
    with kernel_warnings("ConversionWarning"):        # io-aware stages some gemm epilogues through shared memory
        assert gpu_check.main(["--offline", "--case", case, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    (record,) = json.loads(out.read_text())["variants"]
    assert record["ok"] and record["gflop"] > 0 and record["variant"].startswith(case)
    if case.startswith("gemm_fp8"):
        assert record["arch"] == "sm_90a" and record["gemms"].startswith("wgmma m64n64k32 e5m2xe5m2->f32")
    else:
        assert record["arch"] == "sm_80" and "mma.sync m16n8k16" in record["gemms"]
    if shutil.which("nvcc"):
        assert record["nvcc_s"] not in ("-", "FAIL")
    assert "gemms:" in text
