"""Tensor-core instructions as PTX defines them: shapes, dtype signatures and register fragments.

This module is the single statement of *who holds what* for the instructions the gemm lowering
emits, written from the PTX ISA's "Matrix Fragments" tables (mma.m16n8k16 / m16n8k32 / m16n8k8 .tf32 / m8n8k4 .f64,
ldmatrix, wgmma .m64nNk16/.m64nNk32/.m64nNk8). The 8-bit tables serve int8 and fp8 (e4m3/e5m2) alike. The lowering uses it to decide which logical element goes into which
register of which lane; the CPU emulation (``emulate_mma``) uses it to compute what the hardware
would compute from those registers. It deliberately shares no code with the inference-side
fragment builders (``tilelayout.gemm_layouts``): a disagreement between the layouts inference
picks and the instruction's real ownership then shows up as a wrong number on the CPU.

Every map works on Python ints and on TIR expressions alike (only ``+ * // %`` are used).

Conventions: ``lane`` in [0, 32); a register holds ``pack`` elements of a multiplicand
(``pack = 32 // bits``: 2 for 16-bit, 4 for 8-bit types), element ``part`` in the low bits first.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MmaInst", "WgmmaInst", "mma_instruction", "wgmma_instruction", "MMA_SIGNATURES",
           "WGMMA_SIGNATURES", "MMA_MIN_SM", "FP8", "PTX_TYPE", "TF32_MASK", "operand_ptx", "dtype_bits", "ldmatrix_lane_row", "ldmatrix_element"]

#: TVM dtype -> PTX element type name
PTX_TYPE = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64", "int8": "s8", "uint8": "u8",
            "int32": "s32",
            "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}


def dtype_bits(dtype: str) -> int:
    import tvm
    return tvm.DataType(str(dtype)).bits


def operand_ptx(dtype: str) -> str:
    """The PTX type of a multiplicand: f32 operands enter the tensor core as .tf32 (the register holds the f32
    bits; the tensor core reads the sign, the exponent and the top 10 mantissa bits)."""
    return "tf32" if str(dtype) == "float32" else PTX_TYPE[str(dtype)]


#: the bits of an f32 register a .tf32 multiplicand keeps: the low 13 mantissa bits are dropped (truncation)
TF32_MASK = 0xFFFFE000


class _TensorCoreInst:
    """What the mma.sync and wgmma instructions share: the dtype signature and the accumulator's packing."""

    @property
    def c_pack(self) -> int:
        """Accumulator elements per register: 2 for an f16 accumulator (f16x2), else 1."""
        return 2 if self.acc_dtype == "float16" else 1

    @property
    def types(self) -> str:
        """``AxB->C`` in PTX type names, as instruction names show them."""
        return f"{operand_ptx(self.a_dtype)}x{operand_ptx(self.b_dtype)}->{PTX_TYPE[self.acc_dtype]}"


@dataclass(frozen=True)
class MmaInst(_TensorCoreInst):
    """One warp-level ``mma.sync.aligned.m16n8kK.row.col`` instruction."""

    k: int                      # 16 (16-bit inputs), 32 (8-bit), 8 (tf32), 4 (f64: m8n8k4)
    a_dtype: str
    b_dtype: str
    acc_dtype: str              # float32, float16, int32 or float64
    m: int = 16
    n: int = 8

    @property
    def pack(self) -> int:
        """Multiplicand elements per register (32-bit registers; one f64 per 64-bit register)."""
        return max(1, 32 // dtype_bits(self.a_dtype))

    @property
    def reg_dtype(self) -> str:
        """The register type of the multiplicands: b32 (uint32) except f64's own .f64 registers."""
        return "float64" if dtype_bits(self.a_dtype) == 64 else "uint32"

    @property
    def a_regs(self) -> int:
        return self.m * self.k // 32 // self.pack

    @property
    def b_regs(self) -> int:
        return self.k * self.n // 32 // self.pack

    @property
    def c_elems(self) -> int:
        return self.m * self.n // 32

    @property
    def ptx(self) -> str:
        acc = PTX_TYPE[self.acc_dtype]
        sat = ""
        return (f"mma.sync.aligned.m{self.m}n{self.n}k{self.k}.row.col{sat}.{acc}.{operand_ptx(self.a_dtype)}."
                f"{operand_ptx(self.b_dtype)}.{acc}")

    @property
    def name(self) -> str:
        return f"mma.sync m{self.m}n{self.n}k{self.k} {self.types}"

    # The maps below are the m16n8kK tables; with m = 8 and one register per operand they are also m8n8k4's
    # (.f64: A row lane // 4, k lane % 4; B k lane % 4, column lane // 4; C row lane // 4, columns 2 * (lane % 4)
    # + {0, 1}), the only m8n8 shape lowered here.
    # ---- A (m x k, "row"): reg r, part p of lane -> (row, k)
    def a_element(self, lane, reg, part):
        kp = self.pack
        return lane // 4 + 8 * (reg % 2), (lane % 4) * kp + part + 4 * kp * (reg // 2)

    def a_owner(self, row, k):
        """(lane, reg, part) holding A[row, k] (row < 16, k < K)."""
        kp = self.pack
        return (row % 8) * 4 + (k % (4 * kp)) // kp, row // 8 + 2 * (k // (4 * kp)), k % kp

    # ---- B (k x n, "col"): reg r, part p of lane -> (k, col)
    def b_element(self, lane, reg, part):
        kp = self.pack
        return (lane % 4) * kp + part + 4 * kp * reg, lane // 4

    def b_owner(self, k, col):
        kp = self.pack
        return col * 4 + (k % (4 * kp)) // kp, k // (4 * kp), k % kp

    # ---- C/D (m x n): element e (0..3) of lane -> (row, col); register e // c_pack, part e % c_pack
    def c_element(self, lane, e):
        return lane // 4 + 8 * (e // 2), (lane % 4) * 2 + e % 2

    def c_owner(self, row, col):
        """(lane, element index e)."""
        return (row % 8) * 4 + col // 2, 2 * (row // 8) + col % 2


FP8 = ("float8_e4m3fn", "float8_e5m2")

#: (A, B, accumulator) dtype signatures mma.sync supports here, with their K
MMA_SIGNATURES = {
    ("float16", "float16", "float32"): 16,
    ("bfloat16", "bfloat16", "float32"): 16,
    ("float16", "float16", "float16"): 16,
    ("int8", "int8", "int32"): 32,
    ("uint8", "uint8", "int32"): 32,
    ("int8", "uint8", "int32"): 32,
    ("uint8", "int8", "int32"): 32,
    ("float32", "float32", "float32"): 8,          # m16n8k8 .tf32 (f32 registers read at tf32 precision)
    ("float64", "float64", "float64"): 4,          # m8n8k4 .f64 (DMMA)
    # fp8 (sm_89+): the .f8type line quantifies A and B independently, f32 or f16 accumulators
    **{(a, b, acc): 32 for a in FP8 for b in FP8 for acc in ("float32", "float16")},
}

#: the oldest architecture of each operand dtype's mma.sync line (sm_80 otherwise)
MMA_MIN_SM = {"float8_e4m3fn": 89, "float8_e5m2": 89}


def mma_instruction(a_dtype: str, b_dtype: str, acc_dtype: str) -> MmaInst | None:
    k = MMA_SIGNATURES.get((str(a_dtype), str(b_dtype), str(acc_dtype)))
    if k is None:
        return None
    mn = (8, 8) if str(a_dtype) == "float64" else (16, 8)
    return MmaInst(k, str(a_dtype), str(b_dtype), str(acc_dtype), *mn)


@dataclass(frozen=True)
class WgmmaInst(_TensorCoreInst):
    """One warpgroup-level ``wgmma.mma_async.sync.aligned.m64nNkK`` instruction (128 threads)."""

    n: int
    k: int
    a_dtype: str
    b_dtype: str
    acc_dtype: str
    m: int = 64

    @property
    def pack(self) -> int:
        return 32 // dtype_bits(self.a_dtype)

    @property
    def c_elems(self) -> int:
        return self.n // 2

    @property
    def transposable(self) -> bool:
        """Whether the instruction takes the transpose immediates (16-bit types only; 8-bit operands are
        K-major)."""
        return dtype_bits(self.a_dtype) == 16

    @property
    def shape(self) -> str:
        return f"m{self.m}n{self.n}k{self.k}"

    def ptx(self, form: str) -> str:
        return (f"wgmma.mma_async.sync.aligned.{self.shape}.{PTX_TYPE[self.acc_dtype]}."
                f"{operand_ptx(self.a_dtype)}.{operand_ptx(self.b_dtype)}")

    @property
    def name(self) -> str:
        return f"wgmma {self.shape} {self.types}"

    # ---- D (64 x n): thread t (0..127) element e -> (row, col)
    def c_element(self, thread, e):
        warp, lane = thread // 32, thread % 32
        return 16 * warp + lane // 4 + 8 * ((e % 4) // 2), 8 * (e // 4) + (lane % 4) * 2 + e % 2

    def c_owner(self, row, col):
        """(thread in the warpgroup, element index e)."""
        return (row // 16) * 32 + (row % 8) * 4 + (col % 8) // 2, (col // 8) * 4 + ((row % 16) // 8) * 2 + col % 2

    # ---- A from registers (the rs form): thread t reg r part p -> (row, k); four registers
    def a_element(self, thread, reg, part):
        warp, lane = thread // 32, thread % 32
        kp = self.pack
        return 16 * warp + lane // 4 + 8 * (reg % 2), (lane % 4) * kp + part + 4 * kp * (reg // 2)

    def a_owner(self, row, k):
        kp = self.pack
        return ((row // 16) * 32 + (row % 8) * 4 + (k % (4 * kp)) // kp, (row % 16) // 8 + 2 * (k // (4 * kp)),
                k % kp)


#: (A, B, accumulator) dtype signatures lowered to wgmma, with their K. 8-bit operands must be K-major in
#: shared memory (the fp8 lines have no transpose immediates)
WGMMA_SIGNATURES = {
    ("float16", "float16", "float32"): 16,
    ("bfloat16", "bfloat16", "float32"): 16,
    ("float16", "float16", "float16"): 16,
    ("float32", "float32", "float32"): 8,          # m64nNk8 .tf32, K-major only
    **{(a, b, acc): 32 for a in FP8 for b in FP8 for acc in ("float32", "float16")},
}


def wgmma_instruction(n: int, a_dtype: str, b_dtype: str, acc_dtype: str) -> WgmmaInst | None:
    k = WGMMA_SIGNATURES.get((str(a_dtype), str(b_dtype), str(acc_dtype)))
    if k is None or n % 8 or not 8 <= n <= 256:
        return None
    return WgmmaInst(n, k, str(a_dtype), str(b_dtype), str(acc_dtype))


# ------------------------------------------------------------------ ldmatrix (.m8n8, .b16)

def ldmatrix_lane_row(lane):
    """(matrix, row) whose row address ``lane`` supplies: lanes 8j..8j+7 give rows 0..7 of matrix j."""
    return lane // 8, lane % 8


def ldmatrix_element(lane, trans: bool):
    """(row, col16, ...) of matrix j that register j of ``lane`` receives, as (row, first 16-bit column)
    for the plain form, or the two (row, col) cells for ``.trans``."""
    if not trans:
        return lane // 4, (lane % 4) * 2
    return ((lane % 4) * 2, lane // 4), ((lane % 4) * 2 + 1, lane // 4)
