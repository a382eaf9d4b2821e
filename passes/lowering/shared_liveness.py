"""Keeping shared tiles that tensor-core and ``cp.async`` instructions address alive for the whole kernel.

apache-tvm 0.27 merges every dynamic shared allocation of a kernel into one buffer and lets tiles whose lifetimes
do not overlap share bytes (``s_tir.transform.MergeSharedMemoryAllocations``; static ones too under the
``tirx.merge_static_smem`` option). Its liveness analysis looks at loads and stores and at the buffer variable
named directly, but inside ``address_of(B[i])`` it only visits the index: a tile that ``ldmatrix``, ``cp.async``
or a wgmma descriptor reaches through ``address_of`` looks dead there. Flash attention's ``Q_shared`` is stored
once before the key loop and then read only by ``ldmatrix``, so the merge put ``K_shared`` (first stored in
the loop) on the same bytes, and the kernel multiplied K by K: a wrong result on every GPU, invisible to the
CPU check, which keeps each tile in its own array. A tile only ``cp.async`` writes was never seen at all, and
the merge stopped with an internal error.

So every shared tile that some ``address_of`` reaches is named directly (``tvm_access_ptr(t, B, 0, size, 0)``:
no access mode, so no barrier analysis counts it, and no code; the merge analysis counts it as a use of ``B``)
where its life starts and where it ends: a dynamic tile of the kernel's top level right before the first and
right after the last statement naming it (the start right after the allocations when the block's dynamic tiles
differ in dtype), any other tile right after the allocations and at the end of its block. A tile first named
after another's end may take its bytes (an epilogue's staging tile on the dead pipeline stages, which
``stage_arena`` puts in one allocation for it), behind a barrier this pass places. The shared-memory budget
(``pipeline_plan``) still counts every tile side by side. Tiles reached only by loads and stores keep TVM's reuse, whose analysis sees them. The same pass
never places a dynamic tile of 32 bits or less, so those are widened and marked too
(``widen_tiny_dynamic_tiles``). The CPU build drops the markers (``drop_keep_alive``); passes that replace
shared allocations (``software_pipeline``) re-mark afterwards.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from ..ir_utils import int_value, mapped, walk

__all__ = ["keep_shared_alive", "drop_keep_alive", "is_keep_alive", "merge_overlap", "widen_tiny_dynamic_tiles"]

_SHARED = ("shared", "shared.dyn")


def is_keep_alive(stmt) -> bool:
    """A marker statement of this module: ``Evaluate(tvm_access_ptr(t, B, 0, size, 0))`` (no access mode)."""
    if not isinstance(stmt, tirx.Evaluate):
        return False
    call = stmt.value
    if not (isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op)
            and str(call.op.name) == "tirx.tvm_access_ptr" and len(call.args) == 5):
        return False
    return all(isinstance(a, tirx.IntImm) and int(a) == 0 for a in (call.args[2], call.args[4]))


def _elements(buf) -> int | None:
    """Elements of a tile, or None for a symbolic shape."""
    shape = [int_value(x) for x in buf.shape]
    if not shape or any(x is None for x in shape):
        return None
    n = 1
    for x in shape:
        n *= x
    return n


def _tile_bits(buf) -> int | None:
    """Bits a tile occupies, or None for a symbolic shape."""
    n = _elements(buf)
    return None if n is None else n * tvm.DataType(str(buf.dtype)).bits


def _marker(buf) -> tirx.Stmt:
    """The whole tile as its extent: TVM's buffer compaction then keeps every element (a widened tiny tile
    would otherwise be trimmed back to the one element its code touches)."""
    return tirx.Evaluate(tirx.call_intrin("handle", "tirx.tvm_access_ptr", tirx.type_annotation(str(buf.dtype)),
                                          buf, 0, _elements(buf) or 1, 0))


def _addressed(body) -> list:
    """Shared buffers some ``address_of`` reaches, in first-seen order."""
    found: list = []

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and str(c.op.name) == "tirx.address_of" and c.args \
                and isinstance(c.args[0], TensorLoad):
            buf = c.args[0].source
            if str(buf.scope()) in _SHARED and not any(buf.same_as(b) for b in found):
                found.append(buf)

    walk(body, [(tvm.ir.Call, on_call)])
    return found


def drop_keep_alive(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` without this module's markers."""
    def on_seq(s):
        kept = [x for x in s.seq if not is_keep_alive(x)]
        if len(kept) == len(s.seq):
            return s
        return kept[0] if len(kept) == 1 else tirx.SeqStmt(kept) if kept else tirx.Evaluate(0)

    return func.with_body(mapped(func.body, [(tirx.SeqStmt, on_seq)]))


def widen_tiny_dynamic_tiles(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every dynamic shared tile of 32 bits or less widened to 64 bits: the last dimension is
    lengthened, every index stays in bounds, and ``keep_shared_alive`` marks it (``_small_dynamic``; TVM's
    compaction would trim it back). TVM's merge never frees such a tile ("small arrays stay in
    registers") and gives offsets only to tiles it has freed, so a kernel with one beside other dynamic tiles
    stopped with an internal error (``buffer_byte_offsets``; fuzz seed 2446 kernel 10, a one-float tile)."""
    swap: list = []

    def on_alloc(a):
        buf = a.buffer
        total = _tile_bits(buf)
        if str(buf.scope()) != "shared.dyn" or total is None or total > 32:
            return a
        shape = [int_value(x) for x in buf.shape]
        grow = -(-64 // total)
        new = tirx.decl_buffer(shape[:-1] + [shape[-1] * grow], str(buf.dtype), name=str(buf.name),
                               scope="shared.dyn", data_alignment=int(buf.data_alignment))
        swap.append((buf, new))
        return tirx.AllocBuffer(new, a.annotations)

    body = mapped(func.body, [(tirx.AllocBuffer, on_alloc)])
    if not swap:
        return func

    def new_of(buf):
        return next((n for o, n in swap if o.same_as(buf)), None)

    def on_load(e):
        n = new_of(e.source)
        return e if n is None else tirx.BufferLoad(n, list(e.indices))

    def on_store(st):
        n = new_of(st.buffer)
        return st if n is None else tirx.BufferStore(n, st.value, list(st.indices))

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and str(c.op.name) == "tirx.tvm_access_ptr" and new_of(c.args[1]) is not None:
            return tirx.call_intrin(c.ty, "tirx.tvm_access_ptr", c.args[0], new_of(c.args[1]), *c.args[2:])
        return c

    body = mapped(body, [(TensorLoad, on_load), (tirx.BufferStore, on_store), (tvm.ir.Call, on_call)])
    return func.with_body(body)


def _small_dynamic(body) -> list:
    """Dynamic shared tiles of 64 bits or less (tiny ones after widening): marked too, or TVM's compaction trims
    a widened tile back to what its code touches (a later run of ``keep_shared_alive`` no longer sees them as
    widened)."""
    found: list = []

    def on_alloc(a):
        total = _tile_bits(a.buffer)
        if str(a.buffer.scope()) == "shared.dyn" and total is not None and total <= 64:
            found.append(a.buffer)

    walk(body, [(tirx.AllocBuffer, on_alloc)])
    return found


def keep_shared_alive(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every addressed shared tile named right after its allocation block and at its end (module
    docstring), and tiny dynamic tiles widened (``widen_tiny_dynamic_tiles``); earlier markers are replaced, so
    running it again changes nothing."""
    func = widen_tiny_dynamic_tiles(drop_keep_alive(func))
    addressed = _addressed(func.body)
    addressed += [b for b in _small_dynamic(func.body) if not any(b.same_as(a) for a in addressed)]
    if not addressed:
        return func

    nested = _nested_allocations(func.body)

    def on_seq(s):
        seq = list(s.seq)
        here = [k for k, x in enumerate(seq) if isinstance(x, tirx.AllocBuffer)
                and any(x.buffer.same_as(b) for b in addressed)]
        if not here:
            return s
        bufs = [seq[k].buffer for k in here]
        # right after the last addressed tile's allocation: an allocation further down the sequence (a gemm's
        # operand registers, allocated where the gemm runs) would move the marker past the tile's first uses,
        # and TVM's storage rewrite could then place the tile on the bytes of one that dies before them, with a
        # marker naming a buffer of another dtype (LowerIntrin refuses that; fuzz seed 2807 kernel 29)
        last = max(here)
        ends = {k: _last_use(seq, last + 1, b, nested) for k, b in enumerate(bufs)}
        # a marker right before a tile's first use lets TVM's merge give the tile a dead one's bytes; its storage
        # rewrite then renames the marker's buffer to the dead tile's, which LowerIntrin refuses when the dtypes
        # differ (fuzz seed 2807 kernel 29): only where every dynamic tile of the block has one dtype
        dtypes = {str(x.buffer.dtype) for x in seq if isinstance(x, tirx.AllocBuffer)
                  and str(x.buffer.scope()) == "shared.dyn"}
        starts = {k: _first_use(seq, last + 1, b, nested) if len(dtypes) == 1 else None for k, b in enumerate(bufs)}
        after: dict = {}
        before: dict = {}
        for k, b in enumerate(bufs):
            after.setdefault(ends[k], []).append(b)
            before.setdefault(starts[k], []).append(b)
        # two sets of nodes, not one reused: the merge keys its liveness events by statement node
        out = seq[:last + 1] + [_marker(b) for b in before.get(None, [])]
        dead, seen = False, set()
        for j in range(last + 1, len(seq)):
            names = _shared_names(seq[j]) if not isinstance(seq[j], tirx.AllocBuffer) else set()
            if dead and names - seen and not _is_barrier(seq[j - 1]):
                # TVM's merge may give this newly named tile the bytes of one that died since the last barrier:
                # every thread must be done with those (ldmatrix reads and landed copies included: a pipeline's
                # drain waits for its copies before this barrier)
                out.append(tirx.Evaluate(tirx.op.tvm_storage_sync("shared")))
                dead = False
            if _is_barrier(seq[j]):
                dead = False
            seen |= names
            out += [_marker(b) for b in before.get(j, [])]
            out.append(seq[j])
            out += [_marker(b) for b in after.get(j, [])]
            dead = dead or j in after
        out += [_marker(b) for b in after.get(len(seq), [])]
        return tirx.SeqStmt(out)

    return func.with_body(mapped(func.body, [(tirx.SeqStmt, on_seq)]))


def _mentions(stmt, buf) -> bool:
    found: list = []
    walk(stmt, [(tirx.Var, lambda v: found.append(1) if v.same_as(buf) else None)])
    return bool(found)


def _nested_allocations(body) -> list:
    """Shared tiles allocated inside a loop or a branch: their end marker stays at the end of their block (a
    loop's next iteration, or a thread that skips the branch, would need a barrier this pass cannot place)."""
    found: list = []

    def inner(node):
        walk(node.body if isinstance(node, tirx.For) else node, [(tirx.AllocBuffer, lambda a: found.append(a.buffer))])
    walk(body, [(tirx.For, inner), (tirx.IfThenElse, inner)])
    return found


def _last_use(seq: list, start: int, buf, nested: list) -> int:
    """Index of the last statement of ``seq`` (from ``start``) that names ``buf``; ``len(seq)`` -- the block's
    end -- for a tile that is not a dynamic one of the kernel's top level, or that nothing names."""
    if str(buf.scope()) != "shared.dyn" or any(buf.same_as(b) for b in nested):
        return len(seq)
    uses = [j for j in range(start, len(seq)) if _mentions(seq[j], buf)]
    return uses[-1] if uses else len(seq)


def _first_use(seq: list, start: int, buf, nested: list) -> int | None:
    """Index of the first statement of ``seq`` (from ``start``) that names ``buf``, for a dynamic tile of the
    kernel's top level (its marker goes right before it, so TVM's merge may give it the bytes of a tile that died
    earlier: a gemm epilogue's staging tile on the pipeline's stages); None -- right after the allocations --
    for any other tile, or one nothing names."""
    if str(buf.scope()) != "shared.dyn" or any(buf.same_as(b) for b in nested):
        return None
    return next((j for j in range(start, len(seq)) if not isinstance(seq[j], tirx.AllocBuffer)
                 and _mentions(seq[j], buf)), None)


def _shared_names(stmt) -> set:
    """Names of the shared buffers ``stmt`` names."""
    names: set = set()

    def on_var(v):
        try:
            scope = str(v.scope())
        except Exception:  # noqa: BLE001 -- a plain variable has no storage scope
            return
        if scope in _SHARED:
            names.add(str(v.name))
    walk(stmt, [(tirx.Var, on_var)])
    return names


def _is_barrier(stmt) -> bool:
    call = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    return isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op) \
        and str(call.op.name) == "tirx.tvm_storage_sync"


def merge_overlap(mod) -> str | None:
    """What TVM's CUDA build does to the dynamic shared tiles of a lowered module, checked: its pipeline is run
    up to and including ``MergeSharedMemoryAllocations`` (compaction and the rest before it included), which
    must not fail and must give the tiles some ``address_of`` reaches at least the bytes of those of them live at
    once (``_live_peak``); and every use of such a tile must lie where TVM sees it live (between the first and the
    last statement naming it directly). None when all holds, else what went wrong. For tests and the fuzzer:
    the CPU check keeps every tile in its own array and cannot see either."""
    from tvm.ir.instrument import pass_instrument
    func = mod[list(mod.functions)[0]]
    tiles = [b for b in _addressed(func.body) if str(b.scope()) == "shared.dyn"]
    hidden = _uses_outside_visible_range(func.body, tiles)
    if hidden:
        return hidden
    peak, live = _live_peak(func.body, tiles)
    captured: list = []

    class _Stop(Exception):
        pass

    @pass_instrument
    class _AfterMerge:
        def run_after_pass(self, m, info):
            if info.name == "s_tir.MergeSharedMemoryAllocations":
                captured.append(m)
                raise _Stop()

    try:
        with tvm.transform.PassContext(instruments=[_AfterMerge()]):
            tvm.compile(mod, target=func.attrs["target"])
    except Exception as err:  # noqa: BLE001 -- _Stop arrives wrapped by the FFI; anything else is TVM failing
        if not captured:
            return f"TVM's CUDA build failed before its shared-memory merge was done: {str(err).splitlines()[-1]}"
    if not captured:
        return None
    found: list = []
    for f in captured[0].functions.values():
        if hasattr(f, "body"):
            walk(f.body, [(tirx.AllocBuffer, lambda a: found.append(
                int(a.buffer.shape[0]) * tvm.DataType(str(a.buffer.dtype)).bits // 8)
                if str(a.buffer.scope()) == "shared.dyn" and len(a.buffer.shape) == 1 else None)])
    total = sum(found)
    if tiles and total < peak:
        return (f"TVM's shared-memory merge gives {total} bytes to tiles that need {peak} side by side "
                f"({', '.join(live)}, live at once): two of them share bytes")
    return None


def _spans(body, tiles: list, visible_only: bool) -> dict:
    """Tile name -> (statement sequence id, first index, last index) of the statements of the sequence that
    allocates it which name it (``visible_only``: through a load, a store or a marker -- what TVM's liveness
    sees -- not only inside ``address_of``)."""
    out: dict = {}

    def names(stmt, buf) -> bool:
        if not visible_only:
            return _mentions(stmt, buf)
        hits: list = []

        def on_call(c):
            if isinstance(c.op, tvm.ir.Op) and str(c.op.name) == "tirx.tvm_access_ptr" and c.args[1].same_as(buf):
                hits.append(1)
        walk(stmt, [(tirx.BufferStore, lambda st: hits.append(1) if st.buffer.same_as(buf) else None),
                    (TensorLoad, lambda e: hits.append(1) if e.source.same_as(buf) and not _only_addressed(stmt, e)
                     else None),
                    (tvm.ir.Call, on_call)])
        return bool(hits)

    count = [0]

    def on_seq(s):
        seq, count[0] = list(s.seq), count[0] + 1       # sequences numbered in walk order: the same in both calls
        for buf in tiles:
            if any(isinstance(x, tirx.AllocBuffer) and x.buffer.same_as(buf) for x in seq):
                at = [j for j, x in enumerate(seq) if not isinstance(x, tirx.AllocBuffer) and names(x, buf)]
                if at:
                    out[str(buf.name)] = (count[0], min(at), max(at))
    walk(body, [(tirx.SeqStmt, on_seq)])
    return out


def _only_addressed(stmt, load) -> bool:
    """Whether ``load`` occurs in ``stmt`` only as the operand of ``address_of`` (which TVM's liveness skips)."""
    inside: list = []

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and str(c.op.name) == "tirx.address_of" and c.args and c.args[0].same_as(load):
            inside.append(1)
    walk(stmt, [(tvm.ir.Call, on_call)])
    return bool(inside)


def _uses_outside_visible_range(body, tiles: list) -> str | None:
    true, seen = _spans(body, tiles, False), _spans(body, tiles, True)
    for name, (seq, lo, hi) in sorted(true.items()):
        vis = seen.get(name)
        if vis is None or vis[0] != seq or vis[1] > lo or vis[2] < hi:
            return (f"shared tile {name} is used through address_of at statements {lo}..{hi} of its block, but TVM "
                    f"sees it live only at {'none' if vis is None else f'{vis[1]}..{vis[2]}'}: its merge may give "
                    f"those bytes to another tile")
    return None


def _live_peak(body, tiles: list) -> tuple:
    """(bytes, names): the most bytes of ``tiles`` live at one statement of the kernel (a tile is live from the
    first to the last statement of its block naming it; one allocated in a nested block counts everywhere)."""
    spans = _spans(body, tiles, False)
    size = {str(b.name): (_tile_bits(b) or 0) // 8 for b in tiles}
    always = [n for n in sorted(size) if n not in spans]
    seqs = {seq for seq, _, _ in spans.values()}
    best, names = sum(size[n] for n in always), list(always)
    for seq in sorted(seqs):
        mine = {n: (lo, hi) for n, (s, lo, hi) in spans.items() if s == seq}
        others = [n for n, (s, _, _) in spans.items() if s != seq]
        for j in sorted({lo for lo, _ in mine.values()}):
            live = sorted(n for n, (lo, hi) in mine.items() if lo <= j <= hi) + sorted(others) + always
            total = sum(size[n] for n in live)
            if total > best:
                best, names = total, live
    return best, names
