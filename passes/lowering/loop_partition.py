"""Loop partition: a parallel nest with loop layout L becomes, in every thread, serial loops over L's slots.

For a nest over coordinates x with layout L: (x, rep) -> (slot..., thread) the canonical inverse
``(slot..., thread - range_min) -> (x..., rep)`` gives, per thread, the iterations it runs. Guards keep
exactly the cells that are real iterations (padding, thread range, loop predicate); stores to
shared/global memory of a replicated layout are guarded by ``rep == 0`` so each element is written once.
Fragment buffers (``local.fragment``) become per-thread ``local`` arrays of shape ``L_frag.output_shape``
indexed by the fragment's forward index; shared tiles with a layout (swizzles) are stored at their
physical address ``L.forward(coords)``.

The partitioner trusts nothing it can check: it refuses a layout that does not cover the loop, cannot be
inverted or does not fit the launched threads, and (``verify=True``) checks by enumeration that every
thread running an iteration holds the fragment elements it touches, naming the buffer and loop.
"""
from __future__ import annotations


import tvm
from tvm import tirx
from tvm.ir import Range, TensorLoad

from tilelayout.annotate import LAYOUTS_ATTR, LOOP_LAYOUT_KEY, LOOP_PREDICATE_KEY, decode_layout, loop_key, loop_nest
from tilelayout.errors import LayoutError, LoweringError
from tilelayout.exprparse import parse_expr
from tilelayout.fragment import Fragment
from tilelayout.expr import mentions
from tilelayout.layout import Layout, rep_placeholder, substitute

from ..ir_utils import (conj, func_label, int_value, is_memory_scope, make_analyzer, mapped, mutate,  # noqa: F401
                        prim_func_pass, thread_launch, walk)
from .atomics import guard_atomics
from .loop_marks import PARTITIONED_KEY, SLOT_LOOP_KEY

__all__ = ["LoweringError", "LoopPartition", "partition_function", "thread_launch", "buffer_layouts",
           "PARTITIONED_KEY", "SLOT_LOOP_KEY", "mutate", "walk", "int_value", "is_memory_scope"]



def buffer_layouts(func) -> dict:
    """{buffer name: Layout | Fragment} from the function attribute written by layout inference."""
    attrs = func.attrs
    if attrs is None or LAYOUTS_ATTR not in attrs:
        return {}
    out = {}
    raw = attrs[LAYOUTS_ATTR]
    for name in sorted(str(k) for k in raw.keys()):
        try:
            out[name] = decode_layout(raw[name])
        except LayoutError as err:
            raise LoweringError(f"buffer {name}: malformed layout annotation: {err}") from None
    return out


def check_thread_fit(what: str, layout: Fragment, threads: int) -> tuple[int, int]:
    """The (min, extent) thread range of ``layout``, checked against the launched thread count."""
    lo, ext = layout.thread_range or (0, threads)
    if lo + ext > threads:
        raise LoweringError(f"{what}: thread-extent mismatch: its layout is bound to threads [{lo}, {lo + ext}) but "
                            f"the kernel launches {threads} threads (threadIdx.x); layout {layout!r}")
    used = layout.thread_extent
    if used > ext:
        raise LoweringError(f"{what}: thread-extent mismatch: its layout uses {used} threads but is bound to a range "
                            f"of {ext}; layout {layout!r}")
    return lo, ext


def slot_vars(prefix: str, layout: Layout) -> list:
    return [tirx.Var(f"{prefix}{k}" if layout.output_dim > 1 else prefix, "int32") for k in range(layout.output_dim)]


class NoClosedFormInverse(LoweringError):
    """The layout is valid but its canonical inverse has no closed form here (e.g. a diagonal access)."""


def invert(layout: Fragment, what: str):
    """(canonical inverse, exact) of a fragment, as a LoweringError naming ``what`` when impossible."""
    try:
        return layout.inverse_with_info(allow_padding=True)
    except LayoutError as err:
        raise NoClosedFormInverse(f"{what}: cannot partition by layout {layout!r}: {err}") from None


def per_thread_cells(layout: Fragment, tx, threads: int, what: str, prefix: str = "s"):
    """Everything needed to iterate, in one thread, over the cells a fragment gives it.

    Returns (slot vars, slot extents, coords (rep last), guard conditions, analyzer bounds): the cell
    (slots, tx) is the element ``coords[:-1]`` replica ``coords[-1]`` when every guard holds. The bounds
    restrict the thread to the layout's range, so they are valid only under the guards (every guard
    returned is needed; do not filter them with an analyzer built from these bounds).
    """
    lo, ext = check_thread_fit(what, layout, threads)
    inv, exact = invert(layout, what)
    slots = [int_value(s) if int_value(s) is not None else s for s in layout.output_shape]
    if any(not isinstance(s, int) for s in slots):
        raise LoweringError(f"{what}: layout {layout!r} has symbolic slot extents {layout.output_shape}")
    svars = slot_vars(prefix, layout)
    hi = lo + min(ext, int(inv.input_shape[-1]))      # threads past the inverse's extent hold nothing
    t = tx if tx is not None else tirx.const(0, "int32")
    tn = t - lo if lo else t
    bounds = {v: (0, s) for v, s in zip(svars, slots)}
    if tx is not None:
        bounds[tx] = (lo, hi - lo)
    ana = make_analyzer(bounds)
    coords = [ana.simplify(e) for e in inv.forward(*svars, tn)]
    guards = []
    if tx is not None:
        if lo > 0:
            guards.append(tx >= lo)
        if hi < threads:
            guards.append(tx < hi)
    if not exact:
        extents = list(layout.input_shape) + [layout.replicate_size]
        for c, e in zip(coords, extents):
            for cond in (c >= 0, c < e):
                if not ana.can_prove(cond):
                    guards.append(ana.simplify(cond))
    return svars, slots, coords, guards, bounds
# --------------------------------------------------------------------------------------- the pass

def LoopPartition(verify: bool = True):
    """Pass: partition every layout-annotated parallel nest over threads; fragments become local arrays."""
    return prim_func_pass("tilelayout.LoopPartition", lambda func: partition_function(func, verify))


def partition_function(func, verify: bool = True):
    """``func`` with every annotated parallel nest partitioned and fragments turned into local arrays."""
    refuse_shared_views(func)
    tx, threads = thread_launch(func)
    layouts = buffer_layouts(func)
    frag_layouts = fragment_layouts(func, layouts, threads)
    nests = _frontend_nests(func) if verify else []

    def on_for(loop, mutator):
        if LOOP_LAYOUT_KEY in loop.annotations:
            nest = next((n for root, n in nests if root.same_as(loop)), None)
            return _partition_nest(loop, tx, threads, frag_layouts, nest, verify)
        return mutator.default_mutate(loop)

    body = mutate(func.body, [(tirx.For, on_for)])
    body = localize_fragments(body, frag_layouts, tx, threads, shared_layouts(func, layouts))
    return func.with_body(body)


def refuse_shared_views(func) -> None:
    """Refuse a ``T.decl_buffer`` view over a shared tile (``data=S.data``), as views of fragments are refused:
    the view would bypass the tile's layout (a swizzle), and the CPU build, which moves each shared allocation
    to the serialised kernel's top, cannot place it."""
    def on_decl(d):
        data = d.data
        if not (isinstance(data, tvm.ir.Call) and isinstance(data.op, tvm.ir.Op)
                and str(data.op.name) == "tirx.buffer_data" and len(data.args) == 1):
            return
        parent = data.args[0]
        if parent.same_as(d.buffer):
            return
        scopes = (str(d.buffer.scope()), str(parent.scope()))
        if any(sc.startswith("shared") for sc in scopes):
            raise LoweringError(f"buffer {d.buffer.name}: a view (T.decl_buffer over {parent.name}.data) of the "
                                f"shared tile {parent.name} is not supported; index {parent.name} itself")

    walk(func.body, [(tirx.DeclBuffer, on_decl)])


def fragment_layouts(func, layouts: dict, threads: int) -> dict:
    """{fragment buffer Var: Fragment} for every ``local.fragment`` buffer of ``func``, validated."""
    found: list = []

    def on_alloc(node):
        b = node.buffer
        if b.scope() == "local.fragment" and not any(b.same_as(x) for x in found):
            found.append(b)

    used: list = []
    walk(func.body, [((tirx.AllocBuffer, tirx.DeclBuffer), on_alloc),
                     (tirx.BufferStore, lambda s: used.append(s.buffer)), (TensorLoad, lambda e: used.append(e.source))])
    out = {}
    for b in found:
        lay = layouts.get(str(b.name))
        if lay is None and not any(b.same_as(u) for u in used):
            continue                      # never accessed: nothing to place
        if lay is None:
            raise LoweringError(f"fragment {b.name}: no layout annotation ({LAYOUTS_ATTR}); run layout inference first")
        if not isinstance(lay, Fragment):
            raise LoweringError(f"fragment {b.name}: its layout {lay!r} is not a Fragment")
        shape = [int_value(s) for s in b.shape]
        if shape != [int_value(s) if not isinstance(s, int) else s for s in lay.input_shape]:
            raise LoweringError(f"fragment {b.name}: layout covers {lay.input_shape} but the buffer has shape {shape}")
        check_thread_fit(f"fragment {b.name}", lay, threads)
        out[b] = lay
    return out


def _frontend_nests(func) -> list:
    """[(root For, LoopNest)] of every parallel nest, from the front end (for ownership verification)."""
    from .from_inference import ParallelOp, build_op_graph
    from .from_inference import nest_of
    try:
        graph = build_op_graph(func)
    except LayoutError:
        return []
    out = []
    for op in graph.ops:
        if isinstance(op, ParallelOp):
            try:
                out.append((op.root, nest_of(op)))
            except LayoutError:
                continue
    return out


def _verify_nest(key: str, nest, layout: Fragment, frag_layouts: dict) -> None:
    from .from_inference import ownership_error
    by_name = {str(b.name): lay for b, lay in frag_layouts.items()}
    for access in nest.fragment_accesses():
        frag = by_name.get(access.buffer.name)
        if frag is None:
            continue
        err = ownership_error(nest, layout, access, frag)
        if err is not None:
            raise LoweringError(f"buffer {access.buffer.name}: loop {key} cannot be partitioned by its layout: {err}")


def _predicate_expr(text: str, tx, key: str):
    if tx is None:
        raise LoweringError(f"loop {key}: predicate {text!r} names a thread but the kernel launches none")
    try:
        return parse_expr(text, {str(tx.name): tx, "threadIdx.x": tx})
    except LayoutError as err:
        raise LoweringError(f"loop {key}: cannot read its predicate annotation {text!r}: {err}") from None


def _partition_nest(root, tx, threads: int, frag_layouts: dict, nest, verify: bool):
    loops = loop_nest(root)
    key = loop_key(loops)
    layout = decode_layout(root.annotations[LOOP_LAYOUT_KEY])
    if not isinstance(layout, Fragment):
        raise LoweringError(f"loop {key}: its loop layout {layout!r} is not a Fragment")
    n = layout.input_dim
    if n > len(loops):
        raise LoweringError(f"loop {key}: layout {layout!r} has {n} inputs but the nest has {len(loops)} parallel loops")
    extents = [int_value(l.extent) for l in loops[:n]]
    if any(int_value(l.min) != 0 for l in loops[:n]):
        raise LoweringError(f"loop {key}: parallel loops must start at 0 to be partitioned")
    if extents != [int_value(s) if not isinstance(s, int) else s for s in layout.input_shape]:
        raise LoweringError(f"loop {key}: its layout covers {layout.input_shape} but the loop runs over {extents}; "
                            f"iterations would be dropped or invented")
    what = f"loop {key}"
    from .lower_scan import lower_split_scan, split_scan_of
    split = split_scan_of(loops, layout, frag_layouts)
    if split is not None:       # a lang.cumsum row split over warp lanes (chunk scans joined by shuffles)
        if verify and nest is not None:
            _verify_nest(key, nest, layout, frag_layouts)
        return lower_split_scan(loops, *split, tx, threads, key)
    try:
        cells = per_thread_cells(layout, tx, threads, what, "s")
    except NoClosedFormInverse:
        if not layout.is_injective():
            raise
        cells = None
    if verify and nest is not None:
        _verify_nest(key, nest, layout, frag_layouts)
    if cells is None:
        return _scan_nest(root, loops, layout, tx, threads, key)
    svars, slots, coords, guards, bounds = cells
    rep = coords[n]
    body = loops[n - 1].body
    if n < len(loops):  # parallel loops the layout does not cover run serially inside each iteration
        body = _serialize_parallel(body)
    body = _unroll_fragment_scans(body)
    body = substitute(body, {l.loop_var: c for l, c in zip(loops[:n], coords[:n])})
    ann = root.annotations
    if LOOP_PREDICATE_KEY in ann:
        pred = _predicate_expr(str(ann[LOOP_PREDICATE_KEY]), tx, key)
        if not make_analyzer(bounds).can_prove(pred):   # implied by the thread guard unless it says more
            guards.append(pred)
    ana = make_analyzer(bounds)      # valid under the thread guard (``bounds`` restrict the thread range)
    if layout.replicate_size > 1 and not ana.can_prove(rep == 0):
        body = guard_atomics(_guard_memory_stores(body, ana.simplify(rep == 0)), ana.simplify(rep == 0))
    guard = conj(guards)
    if guard is not None:
        full = dict(bounds)
        if tx is not None:
            full[tx] = (0, threads)
        body = guard_outside_barriers(make_analyzer(full).simplify(guard), body)
    for k in reversed(range(len(svars))):
        notes = {SLOT_LOOP_KEY: key} if k == len(svars) - 1 else {}
        if k == 0:
            notes[PARTITIONED_KEY] = key
        body = tirx.For(svars[k], 0, slots[k], tirx.ForKind.SERIAL, body, None, notes)
    return body


def _writes_shared(stmt) -> bool:
    hits: list = []
    walk(stmt, [(tirx.BufferStore, lambda st: hits.append(1) if str(st.buffer.scope()).startswith("shared") else None)])
    return bool(hits)


def guard_outside_barriers(cond, body):
    """``if cond: body`` with the thread guard moved inside every constant-extent serial loop of ``body`` that
    writes shared memory. apache-tvm 0.27's barrier insertion gives such a loop a barrier at the top of its body
    (it cannot tell that each thread reads back only its own elements) and refuses one inside a condition
    ("Cannot insert syncs inside condition"): a lang.cumsum over a shared tile with fewer rows than threads stopped
    the CUDA build. Every thread runs the loop, all reach its barriers, and only the guarded ones run its body.
    The loop's bounds must not depend on the thread (a trip count that differs between threads around a barrier
    would hang the block): only constant bounds are used this way."""
    if isinstance(body, tirx.For) and int(body.kind) == int(tirx.ForKind.SERIAL) and _writes_shared(body.body) \
            and int_value(body.min) is not None and int_value(body.extent) is not None \
            and int_value(getattr(body, "step", None) or 1) == 1:
        return tirx.For(body.loop_var, body.min, body.extent, body.kind, guard_outside_barriers(cond, body.body),
                        body.thread_binding, body.annotations)
    if isinstance(body, tirx.SeqStmt) and _writes_shared(body) and \
            not any(isinstance(c, (tirx.Bind, tirx.LetStmt, tirx.AllocBuffer, tirx.DeclBuffer)) for c in body.seq):
        return tirx.SeqStmt([guard_outside_barriers(cond, c) for c in body.seq])
    return tirx.IfThenElse(cond, body, None)


def _scan_nest(root, loops: list, layout: Fragment, tx, threads: int, key: str):
    """Partition without an inverse: every thread walks the whole loop domain (and the replicas) and runs the
    iterations the layout gives it (``forward_thread(x, rep) == tx``). Always correct for a valid layout, slower
    than walking slots (no vectorisation); used when the inverse has no closed form (reversed or diagonal
    accesses of a fragment, whose loop layout is a rotation or a partial map of the fragment's)."""
    n = layout.input_dim
    lo, _ = check_thread_fit(f"loop {key}", layout, threads)
    xs = [l.loop_var for l in loops[:n]]
    rep = tirx.Var("rep", "int32")
    vmap = dict(zip(layout.forward_vars, xs))
    vmap[rep_placeholder()] = rep
    thread = substitute(layout.forward_thread, vmap)
    body = loops[n - 1].body
    if n < len(loops):
        body = _serialize_parallel(body)
    conds = [(thread + lo if lo else thread) == (tx if tx is not None else tirx.const(0, "int32"))]
    ann = root.annotations
    if LOOP_PREDICATE_KEY in ann:
        conds.append(_predicate_expr(str(ann[LOOP_PREDICATE_KEY]), tx, key))
    body = _unroll_fragment_scans(body)
    if layout.replicate_size > 1:
        body = guard_atomics(_guard_memory_stores(body, rep == 0), rep == 0)
    body = tirx.IfThenElse(conj(conds), body, None)
    if layout.replicate_size > 1:
        body = tirx.For(rep, 0, layout.replicate_size, tirx.ForKind.SERIAL, body)
    else:
        body = substitute(body, {rep: tirx.const(0, "int32")})
    for k in reversed(range(n)):
        notes = {PARTITIONED_KEY: key} if k == 0 else {}
        body = tirx.For(xs[k], 0, int_value(loops[k].extent), tirx.ForKind.SERIAL, body, None, notes)
    return body


def _serialize_parallel(stmt):
    def on_for(f):
        if f.kind == tirx.ForKind.PARALLEL:
            return tirx.For(f.loop_var, f.min, f.extent, tirx.ForKind.SERIAL, f.body, None, f.annotations, f.step)
        return f
    return mapped(stmt, [(tirx.For, on_for)])


def _unroll_fragment_scans(stmt):
    """Serial loops of constant extent whose variable indexes a fragment are unrolled, so the register slot
    is a compile-time constant in every iteration (a runtime index would push the array to local memory)."""
    def indexes_fragment(loop) -> bool:
        hits = []

        def check(buf, indices):
            if buf.scope() == "local.fragment" and any(
                    mentions(i, [loop.loop_var]) for i in indices):
                hits.append(1)
        walk(loop.body, [(tirx.BufferStore, lambda s: check(s.buffer, s.indices)),
                         (TensorLoad, lambda e: check(e.source, e.indices) if tirx.is_buffer_var(e.source) else None)])
        return bool(hits)

    def on_for(f):
        if f.kind == tirx.ForKind.SERIAL and int_value(f.extent) is not None and indexes_fragment(f):
            return tirx.For(f.loop_var, f.min, f.extent, tirx.ForKind.UNROLLED, f.body, None, f.annotations, f.step)
        return f
    return mapped(stmt, [(tirx.For, on_for)])


def _guard_memory_stores(stmt, cond):
    """Only replica 0 performs shared/global side effects; registers of every replica still update."""
    def on_store(s):
        if is_memory_scope(s.buffer.scope()):
            return tirx.IfThenElse(cond, s, None)
        return s
    return mapped(stmt, [(tirx.BufferStore, on_store)])


# --------------------------------------------------------------------------------------- fragments

def shared_layouts(func, layouts: dict) -> dict:
    """{shared buffer Var: Layout} for shared tiles with an annotated (e.g. swizzled) layout, validated."""
    found: list = []

    def on_alloc(node):
        b = node.buffer
        if b.scope().startswith("shared") and str(b.name) in layouts and not any(b.same_as(x) for x in found):
            found.append(b)

    walk(func.body, [(tirx.AllocBuffer, on_alloc)])
    out = {}
    for b in found:
        lay = layouts[str(b.name)]
        if isinstance(lay, Fragment):
            raise LoweringError(f"shared buffer {b.name}: its layout {lay!r} is a Fragment; shared tiles take a Layout")
        shape = [int_value(s) for s in b.shape]
        if shape != [int_value(s) if not isinstance(s, int) else s for s in lay.input_shape]:
            raise LoweringError(f"shared buffer {b.name}: layout covers {lay.input_shape} but the buffer has shape {shape}")
        if not lay.is_injective():
            raise LoweringError(f"shared buffer {b.name}: layout {lay!r} maps two elements to one address: "
                                f"{lay.injectivity_error()}")
        out[b] = lay
    return out


def localize_fragments(body, frag_layouts: dict, tx, threads: int, memory_layouts: dict | None = None):
    """Store buffers physically: fragments as per-thread ``local`` arrays of shape output_shape indexed by
    forward_index; shared tiles with a layout (``memory_layouts``) at address ``forward(coords)``."""
    memory_layouts = memory_layouts or {}
    if not frag_layouts and not memory_layouts:
        return body
    new_bufs, all_layouts = {}, {}
    for b, lay in list(frag_layouts.items()) + list(memory_layouts.items()):
        shape = [int_value(s) if int_value(s) is not None else s for s in lay.output_shape]
        scope = "local" if b in frag_layouts else b.scope()
        # shared tiles with a layout may be read by wgmma descriptors, whose swizzle patterns start at
        # 1024-byte-aligned addresses (TileLang aligns them the same way)
        align = 1024 if scope.startswith("shared") else -1
        new_bufs[b] = tirx.decl_buffer(shape, b.dtype, name=str(b.name), scope=scope, data_alignment=align)
        all_layouts[b] = lay

    def lookup(buf):
        for b, nb in new_bufs.items():
            if b.same_as(buf):
                return b, nb
        return None, None

    bounds: dict = {}
    if tx is not None:
        bounds[tx] = (0, threads)
    state = {"ana": make_analyzer(bounds)}

    def placed(buf, indices):
        """(physical buffer, indices) of an access to ``buf`` under its layout; None for a buffer without one."""
        b, nb = lookup(buf)
        if b is None:
            return None
        return nb, [state["ana"].simplify(e) for e in all_layouts[b].forward(*indices)]

    def on_for(loop, mutator):
        lo, ext = int_value(loop.min), int_value(loop.extent)
        if lo is not None and ext is not None and ext > 0:
            try:
                state["ana"].bind(loop.loop_var, Range.from_min_extent(lo, ext))
            except Exception:  # already bound (shared var): keep the first range
                pass
        return mutator.default_mutate(loop)

    def on_store(s, mutator):
        s = mutator.default_mutate(s)
        hit = placed(s.buffer, list(s.indices))
        return s if hit is None else tirx.BufferStore(hit[0], s.value, hit[1])

    def on_load(e, mutator):
        e = mutator.default_mutate(e)
        hit = placed(e.source, list(e.indices))
        return e if hit is None else tirx.BufferLoad(*hit)

    def on_alloc(a, mutator):
        b, nb = lookup(a.buffer)
        if b is None:
            return mutator.default_mutate(a)
        return tirx.AllocBuffer(nb, a.annotations)

    def on_decl(d, mutator):
        b, _ = lookup(d.buffer)
        if b is not None:
            raise LoweringError(f"buffer {d.buffer.name}: views (DeclBuffer) of a buffer with a layout are not supported")
        return mutator.default_mutate(d)

    return mutate(body, [(tirx.For, on_for), (tirx.BufferStore, on_store), (TensorLoad, on_load),
                         (tirx.AllocBuffer, on_alloc), (tirx.DeclBuffer, on_decl)])
