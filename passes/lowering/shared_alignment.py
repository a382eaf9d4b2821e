"""Declaring the alignment that wgmma descriptors and swizzled tiles assume on TVM's merged shared buffer.

A wgmma descriptor with a 128-, 64- or 32-byte swizzle and base offset 0 (``wgmma_desc``) names a tile whose
swizzle pattern starts at an address aligned to 8 x the swizzle width (1024 bytes for 128B). Every shared tile
with a layout is allocated with ``data_alignment = 1024`` (``loop_partition.localize_fragments``), and TVM's
merge of dynamic shared memory (``s_tir.transform.MergeSharedMemoryAllocations``) honours that inside the
merged buffer: it pads each tile's offset to its alignment. But the merged buffer it creates is a fresh one with
TVM's default alignment, which the CUDA code generator prints as ``extern __shared__ __align__(64) uchar
buf_dyn_shmem[]``: the tiles sit at 1024-byte multiples of a base only promised to be 64-byte aligned, so the
descriptors were right only where the runtime happened to place dynamic shared memory on a 1024-byte boundary.

``compile_module`` builds with TVM's own CUDA pipeline followed by ``declare_shared_alignment``, which gives
every shared buffer the merge made the largest alignment any tile of its scope in the module asked for,
as the ``buffer_data_alignment`` annotation the CUDA code generator prints (``__align__(1024)``, what TileLang
declares; ``alignas`` for static ``__shared__`` buffers, which matters when ``tirx.merge_static_smem`` merges them).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from ..ir_utils import mapped, walk

__all__ = ["PIPELINE", "ALIGN_KEY", "compile_module", "declare_shared_alignment", "requested_alignment",
           "shared_names"]

#: name of the TIR pipeline ``compile_module`` registers with TVM
PIPELINE = "tilelayout_cuda"
#: the AllocBuffer annotation TVM's CUDA code generator prints as ``__align__(N)`` (``tirx::attr``)
ALIGN_KEY = "buffer_data_alignment"


_SHARED = ("shared.dyn", "shared")


def requested_alignment(mod: tvm.IRModule) -> dict:
    """Shared scope -> the largest ``data_alignment`` of a tile of that scope allocated in ``mod``."""
    best: dict = {}

    def on_alloc(a):
        scope = str(a.buffer.scope())
        if scope in _SHARED:
            best[scope] = max(best.get(scope, 0), int(a.buffer.data_alignment))

    for func in mod.functions.values():
        if isinstance(func, tirx.PrimFunc):
            walk(func.body, [(tirx.AllocBuffer, on_alloc)])
    return best


def shared_names(mod: tvm.IRModule) -> set:
    """Names of the shared buffers allocated in ``mod``."""
    names: set = set()
    for func in mod.functions.values():
        if isinstance(func, tirx.PrimFunc):
            walk(func.body, [(tirx.AllocBuffer, lambda a: names.add(str(a.buffer.name))
                              if str(a.buffer.scope()) in _SHARED else None)])
    return names


def declare_shared_alignment(mod: tvm.IRModule, align: dict, keep: set = frozenset()) -> tvm.IRModule:
    """``mod`` with every shared allocation of scope ``s`` not named in ``keep`` (the static tiles, which state their
    own alignment) declared at least ``align[s]``-byte aligned: the buffers TVM's merge made (``buf_dyn_shmem``, and
    ``buf_shmem`` under ``tirx.merge_static_smem``). Every dynamic allocation left is the one extern buffer, whatever
    its name: when the merge leaves a single tile (or the staged tiles' arena, ``stage_arena``) it keeps that
    tile's name, and would print it ``__align__(64)``."""
    if not align:
        return mod

    def on_alloc(a):
        if str(a.buffer.name) in keep and str(a.buffer.scope()) != "shared.dyn":
            return a
        want = align.get(str(a.buffer.scope()), 0)
        have = a.annotations.get(ALIGN_KEY)
        current = int(have) if have is not None else int(a.buffer.data_alignment)
        if current >= want:
            return a
        notes = dict(a.annotations)
        notes[ALIGN_KEY] = tirx.IntImm("int32", want)
        return tirx.AllocBuffer(a.buffer, notes)

    out = {}
    for gv, func in mod.functions.items():
        out[gv] = func.with_body(mapped(func.body, [(tirx.AllocBuffer, on_alloc)])) \
            if isinstance(func, tirx.PrimFunc) else func
    return tvm.IRModule(out, attrs=mod.attrs)


def _pipeline_factory():
    from tvm.tirx import compilation_pipeline as pipelines
    base, finalize_host, finalize_device = pipelines.get_tir_pipeline("s_tir")

    @tvm.transform.module_pass(opt_level=0, name="tilelayout.DeclareSharedAlignment")
    def _run(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        align = requested_alignment(mod)        # before the merge replaces the tiles by one buffer per scope
        return declare_shared_alignment(base(mod), align, shared_names(mod))

    return _run, finalize_host, finalize_device


def _register() -> None:
    from tvm.tirx import compilation_pipeline as pipelines
    if PIPELINE not in pipelines.PIPELINE_MAP:
        pipelines.register_tir_pipeline(PIPELINE, _pipeline_factory)


def compile_module(mod: tvm.IRModule, target):
    """``tvm.compile`` for a lowered CUDA module, with the merged shared buffer declared as aligned as its tiles
    (module docstring); other targets compile as TVM does."""
    target = tvm.target.Target(target) if not isinstance(target, tvm.target.Target) else target
    if target.kind.name != "cuda":
        return tvm.compile(mod, target=target)
    _register()
    return tvm.compile(mod, target=target, tir_pipeline=PIPELINE)
