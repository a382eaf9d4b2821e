"""TVMScript text of a one-function kernel without writing out its launch lines (the block and thread launches
every kernel repeats), and its PrimFunc: for the tests' kernels and the benchmark kernels."""
from __future__ import annotations


def main_text(params: str, *, threads: int | tuple, body: str, blocks: int | tuple = 1) -> str:
    """TVMScript text of a kernel ``main(<params>)`` launched on ``blocks`` blocks (a count along x, the counts
    along x and y, or ``()``: no block launch) of ``threads`` threads (a count along x, or the counts along x, y
    and z), as ``maint/fuzz.py`` writes its kernels; ``body``: the statements after the launch, indented by four
    spaces (a leading newline is dropped)."""
    def launches(kind: str, name: str, counts: int | tuple) -> str:
        counts = counts if isinstance(counts, tuple) else (counts,)
        return "".join(f"    {name}{axis} = T.launch_thread(\"{kind}.{axis}\", {n})\n"
                       for axis, n in zip("xyz", counts))
    return (f"\n@T.prim_func\ndef main({params}):\n{launches('blockIdx', 'b', blocks)}"
            f"{launches('threadIdx', 't', threads)}" + body.removeprefix("\n"))


def parse_main(params: str, *, threads: int | tuple, body: str, blocks: int | tuple = 1, name: str = "main",
               values: dict | None = None):
    """The PrimFunc of ``main_text(params, ...)`` (``T``, ``Tx``, ``lang`` and ``values`` in scope), its global
    symbol ``name``: a kernel (a test's, a benchmark's) written without the launch lines every kernel repeats."""
    import tvm
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx

    from tilelayout import lang
    func = tvm.script.from_source(main_text(params, threads=threads, body=body, blocks=blocks),
                                  extra_vars={"T": T, "Tx": Tx, "lang": lang, **(values or {})})
    return func if name == "main" else func.with_attr("global_symbol", name)


def parse_kernel(params: str, threads: int | tuple, body: str, blocks: int | tuple = 1, **values):
    """``parse_main`` named ``kernel`` (``values``: the Python objects the text calls, an op or a layout): what the
    ``@T.prim_func def kernel`` factories of the kernel modules and benchmarks give, without the launch lines."""
    return parse_main(params, threads=threads, body=body, blocks=blocks, name="kernel", values=values)


def buffer_type(*shape: int, dtype: str = "float32") -> str:
    """The TVMScript type of a global buffer of ``shape`` and ``dtype``, for a kernel's parameter list."""
    dims = ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "")
    return f'T.Buffer(({dims}), "{dtype}")'
