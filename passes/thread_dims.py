"""Multi-dimensional thread blocks (``threadIdx.x`` with ``threadIdx.y`` / ``threadIdx.z``; TileLang's
``threads=(32, 4)``).

Layouts speak of one thread index: the linearised id ``tx + X * (ty + Y * tz)`` (x fastest, as CUDA numbers
the threads of a block). Inference and lowering therefore run on a *folded* kernel that launches one
``threadIdx.x`` of extent ``X * Y * Z`` and reads ``t % X``, ``t // X % Y``, ``t // (X * Y)`` where it read
the components; ``unfold`` restores the original launches afterwards, replacing ``t`` by the linearised id,
so the emitted CUDA keeps the user's block shape and every component the code reads is the right one.
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from tilelayout.errors import LayoutError
from tilelayout.layout import substitute

from .ir_utils import int_value, mapped, walk

__all__ = ["ThreadDims", "fold_thread_dims", "unfold_thread_dims"]

_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


class ThreadDimsError(LayoutError):
    """A multi-dimensional launch the folding cannot express (the message names the launch)."""


@dataclass(frozen=True)
class ThreadDims:
    """The original launches ``{tag: (IterVar, extent)}`` and the folded thread variable."""

    launches: dict
    folded: object        # the folded IterVar (threadIdx.x of the total extent)

    @property
    def total(self) -> int:
        out = 1
        for _, ext in self.launches.values():
            out *= ext
        return out

    def linear_id(self):
        """``tx + X * (ty + Y * tz)`` over the original thread variables."""
        out, scale = None, 1
        for tag in _TAGS:
            if tag in self.launches:
                iv, ext = self.launches[tag]
                out = iv.var if out is None else out + iv.var * scale
                scale *= ext
        return out

    def components(self) -> dict:
        """{original thread Var: expression over the folded thread variable}."""
        t, out, scale = self.folded.var, {}, 1
        for tag in _TAGS:
            if tag in self.launches:
                iv, ext = self.launches[tag]
                part = tirx.floordiv(t, scale) if scale > 1 else t
                out[iv.var] = tirx.floormod(part, ext) if scale * ext < self.total else part
                scale *= ext
        return out


def _launches(func) -> dict:
    found: dict = {}

    def on_attr(n):
        if n.attr_key == "thread_extent" and isinstance(n.node, tirx.IterVar):
            tag = str(n.node.thread_tag)
            if tag in _TAGS:
                ext = int_value(n.value)
                if ext is None:
                    raise ThreadDimsError(f"{tag} extent {n.value} must be a constant to infer layouts")
                prev = found.get(tag)
                if prev is not None and not prev[0].var.same_as(n.node.var):
                    raise ThreadDimsError(f"{tag} is launched twice with different variables; launch each thread "
                                          f"dimension once")
                found[tag] = (n.node, ext)

    def on_for(f):
        binding = f.thread_binding
        if binding is not None and str(binding.thread_tag) in ("threadIdx.y", "threadIdx.z") \
                and int_value(f.extent) not in (None, 1):
            raise ThreadDimsError(f"thread_binding loop over {binding.thread_tag} ({f.loop_var.name}): write the "
                                  f"launch as `{f.loop_var.name} = T.launch_thread(\"{binding.thread_tag}\", "
                                  f"{f.extent})` so it can be folded into the linear thread id")

    walk(func.body, [(tirx.AttrStmt, on_attr), (tirx.For, on_for)])
    return found


def fold_thread_dims(func):
    """``(folded func, ThreadDims)``; ``(func, None)`` when only ``threadIdx.x`` has an extent above 1."""
    found = _launches(func)
    if all(found.get(tag, (None, 1))[1] == 1 for tag in _TAGS[1:]):
        return func, None
    if "threadIdx.x" not in found:
        raise ThreadDimsError("a kernel launching threadIdx.y or threadIdx.z must launch threadIdx.x too "
                              "(extent 1 is fine)")
    total = 1
    for _, ext in found.values():
        total *= ext
    t = tirx.Var("thread_linear", "int32")
    folded = _iter_var(t, total)
    dims = ThreadDims({tag: found[tag] for tag in _TAGS if tag in found}, folded)
    xvar = found["threadIdx.x"][0].var

    def on_attr(n):
        if n.attr_key == "thread_extent" and isinstance(n.node, tirx.IterVar) and str(n.node.thread_tag) in _TAGS:
            if n.node.var.same_as(xvar):
                return tirx.AttrStmt(folded, "thread_extent", tirx.const(total, "int32"), n.body)
            return n.body
        return n

    body = mapped(func.body, [(tirx.AttrStmt, on_attr)])
    body = substitute(body, dims.components())
    return func.with_body(body), dims


def _iter_var(var, extent: int):
    from tvm.ir import Range
    return tirx.IterVar(Range(0, extent), var, tirx.IterVar.ThreadIndex, "threadIdx.x")


def unfold_thread_dims(func, dims: ThreadDims | None):
    """The original launches back, the folded thread variable replaced by the linearised id."""
    if dims is None:
        return func
    t = dims.folded.var

    def on_attr(n):
        if n.attr_key == "thread_extent" and isinstance(n.node, tirx.IterVar) and n.node.var.same_as(t):
            body = n.body
            for tag in reversed(_TAGS):
                if tag in dims.launches:
                    iv, ext = dims.launches[tag]
                    body = tirx.AttrStmt(iv, "thread_extent", tirx.const(ext, "int32"), body)
            return body
        return n

    body = mapped(func.body, [(tirx.AttrStmt, on_attr)])
    return func.with_body(substitute(body, {t: dims.linear_id()}))
