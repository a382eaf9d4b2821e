"""The race check (passes/lowering/race_check.py, race_report.py) on kernels written directly as lowered TIR
(explicit launches, thread-indexed stores, barriers as written), so no lowering decision is involved, and on a
racy tile program through ``check_numeric`` and ``tilelayout check``.

Shared-memory exchanges are checked with their barriers as written (``tvm_barriers=False``): TVM's CUDA build
adds the missing one itself (shown below), so only that mode shows the detector's own barrier logic.
"""
from __future__ import annotations

import io
import textwrap

import numpy as np

import pytest
from tvm.script import tirx as T

import tilelayout as tl
from tilelayout import cli
from tilelayout.errors import LoweringError, RaceError, TileLayoutError
from tilelayout.passes.lowering.race_report import build_race_checked
from conftest import parse_main


def _exchange(name: str, barrier: bool):
    """Two blocks of 32 threads; each thread stores its element of A into a shared slot and reads the mirrored
    slot, with or without a barrier between: the one kernel the race check must tell apart by the barrier."""
    sync = '\n    T.tvm_storage_sync("shared")' if barrier else ""
    return parse_main('A: T.Buffer((64,), "float32"), O: T.Buffer((64,), "float32")', threads=32, blocks=2, name=name,
                      body=f'''
    S = T.alloc_buffer((32,), "float32", scope="shared")
    S[tx] = A[bx * 32 + tx]{sync}
    O[bx * 32 + tx] = S[31 - tx]
''')


exchange_without_barrier = _exchange("exchange_without_barrier", barrier=False)
exchange_with_barrier = _exchange("exchange_with_barrier", barrier=True)


@T.prim_func
def overwrite_before_barrier(A: T.Buffer((32,), "float32"), O: T.Buffer((32,), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    S = T.alloc_buffer((32,), "float32", scope="shared")
    S[tx] = A[tx]
    T.tvm_storage_sync("shared")
    O[tx] = S[(tx + 1) % 32]
    S[tx] = T.float32(0)          # another thread may still be reading S[tx]: needs a barrier first


@T.prim_func
def shared_global_element(A: T.Buffer((32,), "float32"), O: T.Buffer((8,), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    O[tx // 4] = O[tx // 4] + A[tx]


@T.prim_func
def atomic_accumulation(A: T.Buffer((64,), "float32"), O: T.Buffer((8,), "float32")):
    bx = T.launch_thread("blockIdx.x", 2)
    tx = T.launch_thread("threadIdx.x", 32)
    T.evaluate(T.call_extern("float32", "atomicAdd", T.address_of(O[tx // 4]), A[bx * 32 + tx]))


@T.prim_func
def blocks_write_one_element(A: T.Buffer((64,), "float32"), O: T.Buffer((32,), "float32")):
    bx = T.launch_thread("blockIdx.x", 2)
    tx = T.launch_thread("threadIdx.x", 32)
    O[tx] = A[bx * 32 + tx]


@T.prim_func
def out_of_bounds_store(A: T.Buffer((32,), "float32"), O: T.Buffer((32,), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    O[tx * 3] = A[tx]


@T.prim_func
def atomic_after_plain_store(A: T.Buffer((32,), "float32"), O: T.Buffer((32,), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    S = T.alloc_buffer((32,), "float32", scope="shared")
    S[tx] = T.float32(0)
    # TVM's barrier insertion does not see an access through address_of: nothing orders the zero fill first
    T.evaluate(T.call_extern("float32", "atomicAdd", T.address_of(S[(tx + 1) % 32]), A[tx]))
    T.tvm_storage_sync("shared")
    O[tx] = S[tx]


def _run(func, tvm_barriers: bool = True):
    kernel = build_race_checked(func, tvm_barriers=tvm_barriers)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal([int(s) for s in p.shape]).astype("float32") for p in func.params]
    return kernel, arrays, kernel.run(*arrays)


def test_missing_barrier_between_shared_write_and_cross_thread_read_is_reported():
    _, _, races = _run(exchange_without_barrier, tvm_barriers=False)
    assert races
    r = races[0]
    assert (r.buffer, r.scope, r.kind) == ("S", "shared", "read by one thread and written by another")
    assert r.thread + r.other_thread == 31 and r.thread != r.other_thread and r.block == r.other_block
    assert r.element == (31 - r.thread,)
    assert "S[31 - tx]" in r.statement and r.other_statement.startswith("S[tx] =")
    assert "no barrier between them" in r.describe()


def test_the_same_exchange_with_its_barrier_is_clean_and_right():
    _, (a, o), races = _run(exchange_with_barrier, tvm_barriers=False)
    assert races == []
    np.testing.assert_array_equal(o, a.reshape(2, 32)[:, ::-1].reshape(-1))


def test_tvm_inserts_the_missing_shared_barrier_so_the_gpu_kernel_is_clean():
    assert _run(exchange_without_barrier, tvm_barriers=True)[2] == []


def test_write_after_a_cross_thread_read_in_one_interval_is_reported():
    _, _, races = _run(overwrite_before_barrier, tvm_barriers=False)
    assert races and races[0].kind == "written after another thread read it"
    assert races[0].statement.startswith("S[tx] = T.float32(0")


def test_two_threads_updating_one_global_element_are_reported():
    _, _, races = _run(shared_global_element)
    kinds = {r.kind for r in races}
    assert "written by two threads" in kinds and all(r.buffer == "O" for r in races)
    with pytest.raises(RaceError) as info:
        build_race_checked(shared_global_element)(*[np.zeros([int(s) for s in p.shape], "float32")
                                                    for p in shared_global_element.params])
    assert isinstance(info.value, TileLayoutError) and "global buffer O" in str(info.value) and info.value.races


def test_atomics_are_not_races_and_add_up():
    _, (a, o0), races = _run(atomic_accumulation)
    assert races == []
    kernel = build_race_checked(atomic_accumulation)
    rng = np.random.default_rng(1)
    a, o = rng.standard_normal(64).astype("float32"), np.zeros(8, "float32")
    kernel(a, o)
    np.testing.assert_allclose(o, a.reshape(2, 8, 4).sum(axis=(0, 2)), rtol=1e-5)


def test_different_blocks_writing_one_global_element_are_reported():
    _, _, races = _run(blocks_write_one_element)
    assert races and races[0].block != races[0].other_block
    assert "blocks never synchronise" in races[0].describe()


def test_out_of_bounds_store_is_reported_and_not_made():
    _, _, races = _run(out_of_bounds_store)
    assert races and {r.kind for r in races} == {"out-of-bounds write"}
    assert min(r.element[0] for r in races) == 33 and races[0].other_statement is None


def test_atomic_unordered_after_a_plain_store_is_reported():
    _, _, races = _run(atomic_after_plain_store)
    assert races and races[0].kind == "an atomic update and a plain access by different threads"


# --------------------------------------------------------------------------- through the lowering

RACY_SOURCE = textwrap.dedent('''
    from tvm.script import tirx as T

    @T.prim_func
    def accumulate(A: T.Buffer((8, 16), "float32"), O: T.Buffer((8,), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 32)
        for i in T.parallel(8):
            for j in T.parallel(16):
                O[i] = O[i] + A[i, j]
''')


def _racy_kernel(tmp_path):
    path = tmp_path / "racy.py"
    path.write_text(RACY_SOURCE)
    ns: dict = {}
    exec(compile(RACY_SOURCE, str(path), "exec"), ns)      # noqa: S102 -- the test's own source
    return path, ns["accumulate"]


def test_check_numeric_never_passes_a_racy_parallel_accumulation_into_global_memory(tmp_path):
    """Inference now runs each element's iterations in one thread (``memory_writes``); whichever way the kernel
    is handled (lowered race-free, refused by name, or lowered racy) the check must not pass a race."""
    from tilelayout.passes.lowering.pipeline import check_numeric
    _, func = _racy_kernel(tmp_path)
    try:
        res = check_numeric(func)
    except LoweringError as err:          # refused by name is an acceptable answer
        assert "O" in str(err)
        return
    if res.ok:                            # lowered race-free: the race check ran and found nothing
        assert not res.races
        return
    assert res.races and "race on global buffer O" in res.message
    assert check_numeric(func, race_check=False).ok      # the serialised values alone cannot see it


def test_cli_check_describes_a_race_or_passes_a_race_free_lowering(tmp_path):
    path, _ = _racy_kernel(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["check", f"{path}:accumulate"], stdout=out, stderr=err)
    if code == 2:                          # refused by name
        assert "O" in err.getvalue()
        return
    if code == 0:                          # lowered one thread per element: checked under the race check
        assert "race" not in out.getvalue().replace("race check", "")
        return
    assert code == 1 and "race on global buffer O" in out.getvalue()


# --------------------------------------------------------------------------- collectives and async copies

def _golden_lowered(case: str, variant: str):
    from pathlib import Path

    from maint.case_loader import load_case
    from tilelayout.passes.lowering.pipeline import lower_func
    root = Path(__file__).resolve().parents[1] / "cases"
    return lower_func(load_case(root, case).VARIANTS[variant]())


def _rewrite_calls(func, op_name: str, make):
    import tvm
    from tvm import tirx

    from tilelayout.passes.ir_utils import mapped

    def on_eval(e):
        c = e.value
        if isinstance(c, tvm.ir.Call) and isinstance(c.op, tvm.ir.Op) and str(c.op.name) == op_name:
            return make(c)
        return e
    return func.with_body(mapped(func.body, [(tirx.Evaluate, on_eval)]))


def _races_of(func, tvm_barriers: bool = True):
    from tilelayout.passes.lowering.pipeline import random_inputs
    kernel = build_race_checked(func, tvm_barriers=tvm_barriers)
    inputs = random_inputs(func)
    return kernel.run(*[inputs[n].copy() for n in inputs])


def test_a_too_small_cp_async_wait_is_reported_and_the_right_one_is_clean():
    from tvm import tirx
    lowered = _golden_lowered("gemm_pipelined", "sm80_s2_k128")
    assert _races_of(lowered) == []
    early = _rewrite_calls(lowered, "tirx.ptx.cp_async_wait_group", lambda c: tirx.Evaluate(
        tirx.call_intrin(c.ty, c.op, tirx.const(1, "int32"), *c.args[1:])))
    races = _races_of(early)
    assert races and races[0].buffer in ("A_s", "B_s") and "cp.async" in races[0].kind
    assert "landing" in races[0].statement and "ldmatrix" in races[0].other_statement


def test_wgmma_reading_a_tile_no_barrier_orders_after_its_writes_is_reported():
    from tvm import tirx
    lowered = _golden_lowered("gemm_fp8", "sm90a_e4m3_ss_m64n128k64_t128")
    assert _races_of(lowered) == []
    unsynced = _rewrite_calls(lowered, "tirx.tvm_storage_sync", lambda c: tirx.Evaluate(0))
    races = _races_of(unsynced)          # TVM's barrier insertion does not see the descriptors' reads either
    assert races and races[0].buffer in ("A_s", "B_s") and races[0].thread == -2
    assert races[0].statement.startswith("T.ptx.wgmma(")


# --------------------------------------------------------------------------- the fuzzer's racy classes

@pytest.mark.parametrize("cls", ["accumulate-global", "accumulate-shared", "accumulate-grouped", "write-race"])
def test_fuzz_racy_tile_classes_are_refused_or_reported(cls):
    import random

    from maint.fuzz import Kernel, check
    from maint.fuzz_races import _tile_text
    text, threads = _tile_text(random.Random(f"race-test:{cls}"), cls)
    outcomes = check(Kernel(text, threads, notes=[f"racy:{cls}"]), models=("io-aware",))
    # an update is lowered one thread per element (checked race-free and against numpy); a write race is refused
    allowed = {"unsupported", "ok"} if cls.startswith("accumulate") else {"unsupported"}
    assert [o.kind for o in outcomes] and {o.kind for o in outcomes} <= allowed, outcomes


@pytest.mark.parametrize("cls", ["exchange", "shared-global", "atomic", "out-of-bounds"])
def test_fuzz_hand_written_lowered_classes_agree_with_their_index_maps(cls):
    import random

    from maint.fuzz import Kernel, check
    from maint.fuzz_races import _lowered_text
    seen = set()
    for k in range(6):
        text, threads, racy = _lowered_text(random.Random(f"race-test:{cls}:{k}"), cls)
        seen.add(racy)
        outcomes = check(Kernel(text, threads, notes=[f"lowered:{cls}", "race" if racy else "race-free"]),
                         models=("io-aware",))
        assert [o.kind for o in outcomes] == ["ok"], (text, outcomes)
    assert seen == ({False} if cls == "atomic" else {True, False})


def test_fuzz_shuffle_exchanges_agree_with_their_index_maps():
    """The warp-shuffle class: the detector reports a race exactly when the index maps have one (a reader in
    another warp, no shuffle, or a store by a lane that skipped the shuffle), and a race-free one gives numpy's
    values."""
    import random

    from maint.fuzz import Kernel, check, generate
    from maint.fuzz_races import _shuffle_text
    seen = set()
    for k in (0, 1, 3, 4, 11):
        text, threads, racy = _shuffle_text(random.Random(k))
        shuffle = "half" if "< 16" in text else "full" if "shuffle" in text else "none"
        seen.add((shuffle, racy))
        outcomes = check(Kernel(text, threads, notes=["lowered:shuffle", "race" if racy else "race-free"]),
                         models=("io-aware",))
        assert [o.kind for o in outcomes] == ["ok"], (text, outcomes)
    assert {("full", False), ("full", True), ("none", True), ("half", True), ("half", False)} <= seen
    assert any("lowered:shuffle" in generate(1, i).notes for i in range(60))


def test_build_cpu_with_race_check_raises_a_race_error(tmp_path):
    import tilelayout as tl
    _, func = _racy_kernel(tmp_path)
    try:
        kernel = tl.build_cpu(func, race_check=True)
    except LoweringError:                 # refused by name
        return
    A, O = np.ones((8, 16), "float32"), np.zeros(8, "float32")
    try:
        kernel(A, O)
    except tl.RaceError as err:           # lowered racy: the race is named
        assert "global buffer O" in str(err)
        return
    np.testing.assert_array_equal(O, A.sum(axis=1))     # lowered race-free, one thread per element


def test_cross_warp_all_reduce_publishes_each_partial_from_one_lane():
    """Every lane of a warp stored its (equal) partial into one shared slot: a race the check reported on
    three golden cases; now one lane per butterfly coset publishes."""
    from conftest import kernel_warnings
    with kernel_warnings():               # the case is oversized by design (resource warnings)
        lowered = _golden_lowered("reduce_owner_subset", "max_64x256_t64")
    assert _races_of(lowered) == []


# --------------------------------------------------------------------------- warp shuffles order a warp's lanes

def _lane_kernel(name: str, lanes: int, outputs: int, body: str):
    """``lanes`` threads (one block), each with one local register ``v``, reading ``A[tx]`` and ``O``: the kernels
    below differ only in what ``body`` does between the reads, the shuffles and the stores."""
    return parse_main(f'A: T.Buffer(({lanes},), "float32"), O: T.Buffer(({outputs},), "float32")', threads=lanes,
                      name=name, body='\n    v = T.alloc_buffer((1,), "float32", scope="local")\n' + body.lstrip("\n"))


# every lane of warp w reads O[w]; after the butterfly lane 0 of the same warp overwrites it
warp_sum_into_read_element = _lane_kernel("warp_sum_into_read_element", 64, 2, '''
    v[0] = O[tx // 32] * T.float32(0.03125) + A[tx]
    v[0] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], 16, 32, 32)
    v[0] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], 8, 32, 32)
    v[0] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], 4, 32, 32)
    v[0] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], 2, 32, 32)
    v[0] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], 1, 32, 32)
    if tx % 32 == 0:
        O[tx // 32] = v[0]
''')


# as above, but lane 0 of warp w overwrites O[1 - w], which the other warp's lanes read: the shuffle does
# not order another warp
warp_sum_into_other_warps_element = _lane_kernel("warp_sum_into_other_warps_element", 64, 2, '''
    v[0] = O[tx // 32] + A[tx]
    v[0] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], 16, 32, 32)
    v[0] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], 8, 32, 32)
    if tx % 32 == 0:
        O[1 - tx // 32] = v[0]
''')


# lane 0's write is ordered after the reads before the shuffle, not after the lanes' read after it
warp_reread_after_shuffle = _lane_kernel("warp_reread_after_shuffle", 64, 2, '''
    v[0] = O[tx // 32] + A[tx]
    v[0] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], 1, 32, 32)
    v[0] = v[0] + O[tx // 32]
    if tx % 32 == 0:
        O[tx // 32] = v[0]
''')


warp_write_without_shuffle = _lane_kernel("warp_write_without_shuffle", 64, 2, '''
    v[0] = O[tx // 32] + A[tx]
    if tx % 32 == 0:
        O[tx // 32] = v[0]
''')


# only lanes 0-15 reach the shuffle (__activemask() names them): lanes 16-31 read O[0] unordered before
# lane 0's store
shuffle_in_half_a_warp = _lane_kernel("shuffle_in_half_a_warp", 32, 1, '''
    v[0] = O[0] + A[tx]
    if tx < 16:
        v[0] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], 1, 32, 32)
    if tx == 0:
        O[0] = v[0]
''')


# lane 0 stores the shuffle's result into O[0], which lane 31 (outside the condition) read unordered
shuffle_store_in_half_a_warp = _lane_kernel("shuffle_store_in_half_a_warp", 32, 32, '''
    v[0] = O[(tx + 1) % 32] + A[tx]
    if tx < 16:
        O[tx] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], 1, 32, 32)
''')


# a shuffle whose mask names lanes 0-15 does not order lane 16's write after lane 0's read
half_warp_mask_orders_nothing = _lane_kernel("half_warp_mask_orders_nothing", 32, 1, '''
    v[0] = O[0] + A[tx]
    v[0] = v[0] + T.tvm_warp_shuffle_xor(T.uint32(65535), v[0], 1, 16, 32)
    if tx == 16:
        O[0] = v[0]
''')


# the half-warp shuffle orders nothing here; the full-warp one after it still orders the reads before it
half_then_full_shuffle = _lane_kernel("half_then_full_shuffle", 64, 2, '''
    v[0] = O[tx // 32] + A[tx]
    if tx % 32 < 16:
        v[0] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], 1, 32, 32)
    v[0] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], 16, 32, 32)
    if tx % 32 == 0:
        O[tx // 32] = v[0]
''')


def test_a_shuffle_part_of_the_warp_skips_leaves_the_next_full_one_ordering():
    assert _run(half_then_full_shuffle)[2] == []


def test_a_warp_shuffle_orders_its_warps_reads_before_a_lanes_write():
    kernel = build_race_checked(warp_sum_into_read_element)
    rng = np.random.default_rng(3)
    a, o = rng.standard_normal(64).astype("float32"), rng.standard_normal(2).astype("float32")
    want = o + a.reshape(2, 32).sum(axis=1)
    assert kernel.run(a, o) == []
    np.testing.assert_allclose(o, want, rtol=1e-5)


@pytest.mark.parametrize("func,statement", [
    (warp_sum_into_other_warps_element, "O[1 - tx // 32] ="),    # another warp's lanes: a shuffle is no barrier
    (warp_reread_after_shuffle, "O[tx // 32] ="),                # a read after the shuffle is not ordered by it
    (warp_write_without_shuffle, "O[tx // 32] ="),               # the same warp with no shuffle between
    (half_warp_mask_orders_nothing, "O[0] ="),                   # a partial mask synchronises only its lanes
    (shuffle_in_half_a_warp, "O[0] ="),                          # half the warp skips the shuffle
    (shuffle_store_in_half_a_warp, "O[tx] ="),                   # ... and its own store is not ordered either
])
def test_accesses_no_shuffle_orders_are_still_races(func, statement):
    _, _, races = _run(func)
    assert races and all(r.buffer == "O" for r in races)
    assert {r.kind for r in races} <= {"written after another thread read it", "read by one thread and written by another"}
    writes = [r for r in races if r.statement.startswith(statement) or (r.other_statement or "").startswith(statement)]
    assert writes


