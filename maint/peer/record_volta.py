"""Record TileLang 0.1.15's make_volta_swizzled_layout outputs (usage: record_volta.py tests/data/volta_swizzle_tilelang.json).

Development only: run with the TileLang peer venv's Python (see README.md here)."""
import itertools, json, sys
import numpy as np
import pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "shared" / "peer"))
from tilelang_peer import _install_torch_stub
_install_torch_stub()
import tilelang
from tilelang import tvm
from tvm import tirx
from tilelang.layout import make_volta_swizzled_layout

A, B = True, False
CONFIGS = [  # (shape, dtype, is_a, k_inner)
    *[(s, "float16", a, k) for s in [(32, 32), (64, 32), (32, 64)] for a in (A, B) for k in (True, False)],
    ((96, 32), "float16", A, True),
    ((8, 128), "float16", A, False), ((8, 128), "float16", B, False), ((8, 128), "float16", A, True),
    ((16, 64), "float16", A, True), ((16, 64), "float16", B, True),
    ((4, 64), "float16", B, False),
    ((6, 64), "float16", A, False),
    ((32, 48), "float16", A, True),
    ((32, 40), "float16", B, False),
    ((32, 16), "float16", A, True),
    ((1, 32), "float16", A, True), ((3, 5), "float16", B, True), ((1, 1), "float16", A, False),
    ((2, 32, 32), "float16", A, True), ((2, 32, 32), "float16", B, False),
    ((32, 32), "float32", A, True), ((32, 32), "float32", B, False),
    ((8, 128), "int8", B, False), ((32, 32), "bfloat16", B, True),
]

def shp(xs):
    return [int(x) if isinstance(x, (int, tirx.IntImm)) else str(x) for x in xs]

def enumerate_table(L, shape):
    pts = list(itertools.product(*[range(s) for s in shape]))
    out = []
    for p in pts:
        out.extend(int(e) for e in L.map_forward_index([tirx.IntImm("int32", c) for c in p]))
    return out

def eval_printed(exprs, shape):
    names = ["_i", "_j", "_k"][:len(shape)]
    grids = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
    env = dict(zip(names, grids))
    cols = [np.broadcast_to(np.asarray(eval(e, {}, env)), tuple(shape)) for e in exprs]
    return np.stack(cols, axis=-1).reshape(-1).tolist()

cases = []
for shape, dtype, is_a, k in CONFIGS:
    L = make_volta_swizzled_layout(tirx.decl_buffer(shape, dtype, scope="shared"), is_a=is_a, k_inner=k)
    fwd = [str(e) for e in L.get_forward_index()]
    table = enumerate_table(L, shape)
    assert table == eval_printed(fwd, shape), (shape, dtype, is_a, k)
    cases.append({"shape": list(shape), "dtype": dtype, "is_a": is_a, "k_inner": k,
                  "input_shape": shp(L.get_input_shape()), "output_shape": shp(L.get_output_shape()),
                  "forward_index": fwd, "table": table})

n = tirx.Var("n", "int32")
symbolic = []
for shape, is_a, k in [((n, 32, 32), A, True), ((n, 32, 32), B, False)]:
    L = make_volta_swizzled_layout(tirx.decl_buffer(shape, "float16", scope="shared"), is_a=is_a, k_inner=k)
    symbolic.append({"shape": shp(shape), "dtype": "float16", "is_a": is_a, "k_inner": k,
                     "input_shape": shp(L.get_input_shape()), "output_shape": shp(L.get_output_shape()),
                     "forward_index": [str(e) for e in L.get_forward_index()]})

errors = []
for shape in [(n, 32), (32, n), (32,)]:
    try:
        make_volta_swizzled_layout(tirx.decl_buffer(shape, "float16", scope="shared"))
        raise SystemExit(f"expected a refusal for {shape}")
    except tvm.error.InternalError as e:
        msg = [l for l in str(e).strip().splitlines() if "Check failed" in l][-1].strip()
        errors.append({"shape": shp(shape), "dtype": "float16", "error": type(e).__name__ + ": " + msg})

doc = {
    "source": "tilelang 0.1.15, tilelang.layout.make_volta_swizzled_layout(buffer, is_a, k_inner) on "
              "T.decl_buffer(shape, dtype, scope='shared'), CPU-only peer venv",
    "table_format": "flat row-major enumeration of shape (*input_shape, len(forward_index)), computed with "
                    "TileLang's Layout.map_forward_index at every input point (and cross-checked against the "
                    "printed forward_index evaluated with Python // and %)",
    "cases": cases, "symbolic": symbolic, "errors": errors,
}
with open(sys.argv[1], "w") as f:
    f.write("{\n")
    for key in ("source", "table_format"):
        f.write(f"  {json.dumps(key)}: {json.dumps(doc[key])},\n")
    for key in ("cases", "symbolic", "errors"):
        f.write(f"  {json.dumps(key)}: [\n")
        items = doc[key]
        for idx, c in enumerate(items):
            f.write("    " + json.dumps(c, separators=(",", ":")) + ("," if idx + 1 < len(items) else "") + "\n")
        f.write("  ]" + ("," if key != "errors" else "") + "\n")
    f.write("}\n")
print(len(cases), "cases")
