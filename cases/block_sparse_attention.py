"""Block-sparse flash attention (TileLang's ``examples/blocksparse_attention`` kernel, ported as written).

Each query block copies its row of the block mask into a per-thread array (``block_mask[j] = Mask[b, h, bx, j]``)
and runs the whole attention step (K and V tiles through shared memory, two gemms, the online softmax) under
``if block_mask[k] != 0``. Every store into ``block_mask`` is block-uniform, so every thread takes the branch
and the ops under it run on the whole block (``inference/uniform_locals.py``); before, the condition was
refused as a per-thread value. The kernel is the dense one's body (``flash_attention.attention`` with
``masked=True``), so the two cannot drift apart. Pinned:

- every fragment and shared tile is laid out exactly as in the dense kernel of the same shape
  (``flash_attention``'s snapshot): the branch changes which steps run, not where data lives;
- the structural invariants of the dense kernel hold (``flash_attention.check``: all warps on M, row statistics
  on the quad of lanes that shares a row, swizzled shared tiles);
- lowered and run on the CPU, the kernel matches numpy attention under the expanded block mask (a query block
  whose mask row is empty divides 0 by 0, in the kernel, in the example and here alike).
"""
import functools
import json
from pathlib import Path

import numpy as np

from cases import _support, flash_attention as dense

TILELANG = """TileLang 0.1.15 runs its example as written (T.alloc_local block_mask, T.Pipelined with num_stages=1)
and agrees with us, both models: on sm_80 every buffer and loop is the same mapping, and its module holds more
parallel loops (13 against our 7 at 64x64, 11 against 7 at 128x128: its T.Pipelined expands the body before
layout inference), each laid out like one of ours; on sm_90 every fragment is the same mapping after moving
TileLang's thread range [128, 256) to [0, 128) (its pipelined loop becomes a consumer warpgroup after a
producer one)."""



def _block_sparse(arch: str, dim: int, bm: int, bn: int, threads: int, causal: bool, seq: int):
    return dense.attention(arch, dim, bm, bn, threads, causal, seq=seq, masked=True)


#: the example's test (1 batch, 1 head, 256 tokens, d 64, 64x64 blocks, 128 threads, causal) on both targets, and
#: a 128x128-block, 256-thread, non-causal one; names follow ``flash_attention`` (same shapes, same layouts)
VARIANTS = {
    "sm80_d64_b64x64_t128_causal": lambda: _block_sparse("sm_80", 64, 64, 64, 128, True, 256),
    "sm90_d64_b64x64_t128_causal": lambda: _block_sparse("sm_90", 64, 64, 64, 128, True, 256),
    "sm80_d128_b128x128_t256": lambda: _block_sparse("sm_80", 128, 128, 128, 256, False, 512),
}


def _attention(causal: bool, block: int):
    """The example's reference in numpy (float64): scores masked by the block mask expanded to tokens (and the
    causal triangle), softmax, times V. A row with nothing left gives NaN, as the kernel's 0 / 0 does."""
    def ref(d):
        q, k, v = (d[n].astype(np.float64) for n in ("Q", "K", "V"))
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
        keep = np.kron(d["BlockSparseMask"].astype(np.float64), np.ones((block, block))) > 0
        if causal:
            rows, cols = s.shape[-2:]
            keep &= np.arange(rows)[:, None] >= np.arange(cols)[None, :]
        s = np.where(keep, s, -np.inf)
        with np.errstate(invalid="ignore"):
            p = np.exp(s - s.max(-1, keepdims=True))
            return {"O": (p / p.sum(-1, keepdims=True)) @ v}
    return ref


REFERENCE = {name: _attention(name.endswith("_causal"), 128 if "b128" in name else 64) for name in VARIANTS}
TOLERANCE = {name: (2e-2, 2e-2) for name in VARIANTS}        # P is rounded to fp16 before P V, as in the dense case

_DENSE = Path(__file__).resolve().parent.parent / "expected" / "flash_attention.json"


def _placement(d: dict) -> tuple:
    """Where a layout puts each element, whatever its spelling: threads (block-based) and flat slots of a
    fragment, flat offsets of a shared tile (a pipelined tile's stage dimension of one changes nothing)."""
    if d["kind"] == "Fragment":
        return "Fragment", _support.block_threads(d), _support.index_table(d)
    return "Layout", _support.index_table(d)


def _same_placement(a: tuple, b: tuple) -> bool:
    """Equal kinds and equal tables (shape and entries), compared as arrays: nested lists of a 128x128
    tile took most of this check's time."""
    return a[0] == b[0] and len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a[1:], b[1:]))


@functools.lru_cache(maxsize=1)
def _dense_snapshots() -> dict:
    """The dense kernel's recorded snapshots, read once per process (every variant and model asks)."""
    return json.loads(_DENSE.read_text())


def check(variant, model, result):
    dense.check(variant, model, result)
    recorded = _dense_snapshots().get(variant, {}).get(model)
    assert recorded is not None, f"flash_attention has no snapshot of {variant}/{model} to compare with"
    for name, layout in recorded["buffers"].items():
        got = result["buffers"].get(name)
        assert got is not None and _same_placement(_placement(got), _placement(layout)), \
            f"{name} is laid out unlike the dense kernel's: {got} vs {layout}"
