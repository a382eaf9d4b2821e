"""A chained gemm whose user warp policy splits warps over N gets a refusal naming the gemm, its policy and the
policy that infers (``warp_policy="full_row"``), as a ``WarpPolicyConflictError`` (a ``LayoutConflictError``)."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import kernels_mma as K  # noqa: E402
import tilelayout as tl  # noqa: E402


def test_full_col_on_the_second_gemm_of_a_chain_names_it_and_suggests_full_row():
    func = K.attention_chain(policy_o="full_col")
    # by default inference resolves this conflict with a conversion of S through shared memory; with
    # conversions off it is refused, naming the policy
    with pytest.raises(tl.WarpPolicyConflictError) as info:
        tl.infer_layouts(func, conflicts="strict")
    text = str(info.value)
    assert isinstance(info.value, tl.LayoutConflictError)
    assert 'gemm O[0:64, 0:64] <- P[0:64, 0:64] @ C_s[0:64, 0:64] (op #6) has warp_policy="full_col"' in text
    assert "1x4 warps (4 along N)" in text and 'Use warp_policy="full_row" on it' in text
    assert "op #3" not in text.split("The conflict it hit")[0]          # the other gemm has no user policy
    assert "The conflict it hit: buffer S:" in text                      # the engine's own finding stays


def test_square_on_both_gemms_names_both_when_conversions_are_off():
    func = K.attention_chain(policy_s="square", policy_o="square")
    with pytest.raises(tl.WarpPolicyConflictError, match=r'op #3\) has warp_policy="square".*2x2 warps \(2 along N\);'
                                                         r'.*op #6\) has warp_policy="square".*Use warp_policy='
                                                         r'"full_row" on them'):
        tl.infer_layouts(func, conflicts="strict")


def test_the_suggested_policy_infers_and_computes_the_chain():
    func = K.attention_chain(policy_s="full_row", policy_o="full_row")
    res = tl.infer_layouts(func)
    assert all(p.warp_n == 1 for p in res.gemm_plans.values())

    def ref(d):
        s = d["A"].astype(np.float32) @ d["B"].astype(np.float32).T
        o = s.astype(np.float16).astype(np.float64) @ d["C"].astype(np.float64)
        return {"D": o * s.max(axis=1, keepdims=True)}
    from tilelayout.passes.lowering.pipeline import check_numeric
    result = check_numeric(func, ref, tolerance=(5e-2, 5e-2))
    assert result.ok, result.message


def test_an_unchained_square_gemm_keeps_its_policy_and_no_hint_is_made():
    func = K.gemm(64, 64, 32)
    (plan,) = tl.infer_layouts(func, {"kind": "cuda", "arch": "sm_80"}).gemm_plans.values()
    assert (plan.warp_m, plan.warp_n, plan.policy) == (2, 2, "square")


def test_a_conflict_without_an_n_splitting_user_policy_is_not_blamed_on_the_policy():
    """No user policy (the chain rule picks full_row), or a policy that keeps every warp on M (sm_90, one
    warpgroup): the hint stays silent and the engine's own conflict is what the user sees."""
    from tilelayout.passes.inference import layout_inference as li
    from tilelayout.passes.inference.policy_hint import warp_policy_hint
    err = tl.LayoutConflictError("buffer S: a conflict")
    for func, target in ((K.attention_chain(), "sm_80"), (K.attention_chain(policy_s="square", policy_o="square",
                                                                          arch="sm_90"), "sm_90")):
        hint = warp_policy_hint(func, {"kind": "cuda", "arch": target}, None, None, err, li._Engine,
                                li._SEARCH_ERRORS, li._result)
        assert hint is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = tl.infer_layouts(K.attention_chain(policy_s="square", policy_o="square", arch="sm_90"))
    assert all(p.warp_n == 1 for p in res.gemm_plans.values())
