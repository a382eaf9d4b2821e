"""Exception types. Every user-facing failure of tilelayout is one of these, never a raw TVM error."""


class TileLayoutError(Exception):
    """Base of every tilelayout exception."""


class LayoutError(TileLayoutError, ValueError):
    """A layout is malformed or an operation's precondition on it does not hold."""


class EvaluationError(TileLayoutError, TypeError):
    """An index expression cannot be evaluated exactly (unsupported node, free variable, symbolic extent)."""


class LayoutConflictError(LayoutError):
    """Two ops demand different layouts of one buffer."""


class WarpPolicyConflictError(LayoutConflictError):
    """A gemm's ``warp_policy`` splits its warps over N although it is chained (through a register operand or
    row vectors, as in attention) with gemms whose rows must stay in one warp; the message names the gemm, its
    policy and the policy that infers (``warp_policy="full_row"``)."""


class InferenceError(LayoutError):
    """Layout inference cannot give a buffer or loop a valid layout."""


class WriteRaceError(InferenceError):
    """A parallel nest writes one global or shared element from several iterations in a way no thread layout
    makes race-free (a plain store from many iterations, or an update the nest cannot keep in one thread); the
    message names the buffer, the statement, why, and what to write instead."""


class ScopeError(LayoutError):
    """A buffer is declared with a storage scope tilelayout does not know (a misspelling such as
    ``"local.fragments"``); the message names the buffer and the closest valid scope."""


class LoweringError(LayoutError):
    """A layout or op cannot be lowered correctly; the message names the buffer / loop / op and why."""


class Tcgen05LoweringError(LoweringError):
    """A gemm planned as ``tcgen05.mma`` (Blackwell, sm_100a) reached lowering in a form it does not emit
    (pipelined loops, ...); the message names the gemm and its plan. It is never lowered to mma.sync
    instead."""


class PipelineError(LoweringError):
    """A loop annotated for software pipelining (``num_stages``) cannot be pipelined as written; the message
    names the loop and the buffer or op in the way."""


class RaceError(TileLayoutError):
    """The race check (``tl.build_cpu(..., race_check=True)``, ``check_numeric``) saw two threads access one
    global or shared element without a barrier between them (one of them writing), or an out-of-bounds
    access; ``races`` lists the first ones, each naming the buffer, element, threads and statements."""

    def __init__(self, message: str, races: list | None = None):
        super().__init__(message)
        self.races = list(races or [])


class ConfigError(TileLayoutError, ValueError):
    """An unknown cost model, target or option, or a launch configuration the target cannot run."""


class ReferenceFunctionError(TileLayoutError, ValueError):
    """A numpy reference (``check_numeric``'s ``reference``, ``tilelayout check --reference``) raised, exited,
    or returned something other than ``{parameter name: array of that parameter's size}``; the message names
    the function and what it returned."""


class MissingLaunchError(LoweringError):
    """A kernel lowered for a GPU launches no thread (no ``T.launch_thread``), so TVM builds it as host code
    and there is no device kernel; the message names the kernel and the launch to add."""


class TileLayoutResourceWarning(UserWarning):
    """A kernel's inferred layouts exceed (or come close to) a hardware resource: registers per thread,
    shared memory per block, threads per block, or an unusually large per-thread fragment. The kernel is
    still correct; it may spill, fail to launch or fail to compile on the target."""


class TargetFeatureWarning(UserWarning):
    """The target lacks instructions the lowering would otherwise use (a plain ``sm_90`` instead of ``sm_90a``:
    no wgmma, TMA or setmaxnreg). The kernel is still correct, built from older instructions."""


class UninitializedReadWarning(UserWarning):
    """A register fragment is read before any op writes it: the kernel reads garbage registers (often
    TileLang's source-first ``copy(A, frag)`` carried over to TIRx's destination-first ``Tx.copy``)."""


class UninitializedReadError(InferenceError):
    """Strict mode (``tl.layout_config(strict=True)`` or ``TILELAYOUT_STRICT=1``): a fragment is read before
    any op writes it."""


class ReducerError(InferenceError):
    """A reducer (``tilelayout.lang.alloc_reducer``) is used outside its accumulate-then-finalize protocol: read
    or written other than by ``Tx.fill``, the updates of ``T.parallel`` nests and ``finalize_reducer``."""


def warn_user(message: str, category: type[Warning]) -> None:
    """Issue a warning attributed to the first caller outside tilelayout and TVM.

    The depth at which a warning is raised differs by entry point (a TVM pass, ``infer_layouts``, the CLI),
    so a fixed ``stacklevel`` points into our own modules from some of them; the user's line is the one
    that called into the pipeline.
    """
    import sys
    import warnings
    frame, level = sys._getframe(1), 2      # stacklevel 2 is our caller
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not (module == "tilelayout" or module.startswith(("tilelayout.", "tvm.", "tvm_ffi."))
                or module in ("tvm", "tvm_ffi")):
            break
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
