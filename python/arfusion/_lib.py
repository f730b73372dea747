"""ctypes binding of libarfusion.so: struct mirrors, enum values and function prototypes of
include/arfusion/arfusion.h, checked against the loaded library. Never imports torch.

Where the library comes from (first match wins):
  1. $ARFUSION_LIBRARY (a path to libarfusion.so; an error if it does not exist),
  2. libarfusion.so next to this file (the one `pip install ./python` builds and installs),
  3. the repository's build/libarfusion.so (running from the source tree, PYTHONPATH=python).

Every struct mirror and enum value below is compared with the library's own answer
(arfAbiQuery: sizes, field offsets, enum constants, ARF_API_VERSION) when the library is loaded; a
difference is an ImportError naming the field, so a stale mirror never reaches a kernel.
"""

from __future__ import annotations

import ctypes
import enum
import os
import pathlib
import threading

ARF_API_VERSION = 6
ARF_MAX_RANKS = 8
ARF_UNIQUE_ID_STRING_BYTES = 33

# ---- enums (names are the C names without their prefix; values checked against the library) ----


class Status(enum.IntEnum):
    Success = 0
    InvalidArgument = 1
    Unsupported = 2
    CudaError = 3
    NcclError = 4
    Timeout = 5
    Internal = 6
    CommFailed = 7


class DataType(enum.IntEnum):
    BFloat16 = 0
    Float16 = 1
    Float32 = 2


class Transport(enum.IntEnum):
    Local = 0
    Ipc = 1


class Pattern(enum.IntEnum):
    AllReduce = 0
    ResidualRmsNorm = 1
    ResidualRmsNormFp8PerTensor = 2
    ResidualRmsNormFp8PerToken = 3
    ResidualRmsNormFp8PerGroup = 4
    ResidualRmsNormNvfp4 = 5
    ResidualRmsNormMxfp4 = 6


class ScaleLayout(enum.IntEnum):
    RowMajor = 0
    MnMajor = 1
    Swizzled128x4 = 2


class ScaleFormat(enum.IntEnum):
    Fp32 = 0
    Ue8m0AsFp32 = 1
    Ue8m0Packed = 2


class FallbackLevel(enum.IntEnum):
    Auto = 0
    OneKernel = 1
    TwoKernels = 2
    ThreeKernels = 3


class NormRounding(enum.IntEnum):
    RoundOnce = 0
    RoundBeforeWeight = 1


class Fp8ScaleRule(enum.IntEnum):
    Divide = 0
    TimesReciprocal = 1


class ElementType(enum.IntEnum):
    Float32 = 0
    Float8E4M3 = 1
    UInt8 = 2


class Algorithm(enum.IntEnum):
    Auto = 0
    OneshotLamport = 1
    OneshotPull = 2
    Twoshot = 3
    Unfused = 4
    Nccl = 5


# The C spelling of each mirrored enum constant: prefix + member name.
_ENUM_PREFIX = {
    Status: "arf",
    DataType: "arf",
    Transport: "arfTransport",
    Pattern: "arfPattern",
    ScaleLayout: "arfScale",
    ScaleFormat: "arfScale",
    FallbackLevel: "arfFallback",
    NormRounding: "arfNorm",
    Fp8ScaleRule: "arfFp8Scale",
    ElementType: "arfElement",
    Algorithm: "arfAlgo",
}


def enum_c_name(member: enum.IntEnum) -> str:
    return _ENUM_PREFIX[type(member)] + member.name


def status_name(code: int) -> str:
    """The arfStatus_t constant's C name ("arfTimeout"), or "arfStatus(<code>)" if unknown."""
    try:
        return enum_c_name(Status(code))
    except ValueError:
        return f"arfStatus({code})"


# ---- struct mirrors ------------------------------------------------------------------------------

_enum_t = ctypes.c_int  # C enums of this header are int-sized (checked through the struct layouts)


class arfUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 64)]


class arfCommConfig_t(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("version", ctypes.c_uint),
        ("transport", _enum_t),
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("device", ctypes.c_int),
        ("id", arfUniqueId),
        ("max_tokens", ctypes.c_size_t),
        ("max_hidden", ctypes.c_size_t),
        ("dtype", _enum_t),
        ("oneshot_max_tokens", ctypes.c_size_t),
        ("timeout_seconds", ctypes.c_double),
        ("init_timeout_seconds", ctypes.c_double),
        ("programmatic_launch", ctypes.c_int),
        ("verify_calls", ctypes.c_int),
        ("max_ctas", ctypes.c_int),  # API version 6
    ]


class arfFusedArgs_t(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("version", ctypes.c_uint),
        ("pattern", _enum_t),
        ("algorithm", _enum_t),
        ("dtype", _enum_t),
        ("num_tokens", ctypes.c_size_t),
        ("hidden", ctypes.c_size_t),
        ("input", ctypes.c_void_p),
        ("allreduce_out", ctypes.c_void_p),
        ("residual_in", ctypes.c_void_p),
        ("residual_out", ctypes.c_void_p),
        ("norm_out", ctypes.c_void_p),
        ("gamma", ctypes.c_void_p),
        ("gamma_dtype", _enum_t),
        ("gamma_plus_one", ctypes.c_int),
        ("eps", ctypes.c_float),
        ("quant_out", ctypes.c_void_p),
        ("scale_out", ctypes.c_void_p),
        ("scale_in", ctypes.c_void_p),
        ("scale_layout", _enum_t),
        ("scale_format", _enum_t),
        ("fallback", _enum_t),
        ("norm_rounding", _enum_t),
        ("scale_rule", _enum_t),
        ("post_gamma", ctypes.c_void_p),  # API version 6: a sandwich call's post-norm gamma
    ]


class arfPlan_t(ctypes.Structure):
    _fields_ = [
        ("algorithm", _enum_t),
        ("inner_allreduce", _enum_t),
        ("num_kernels", ctypes.c_int),
        ("grid", ctypes.c_int),
        ("block", ctypes.c_int),
        ("forced", ctypes.c_int),
        ("reason", ctypes.c_char * 128),
        ("fallback_level", ctypes.c_int),
    ]


class arfPlanFacts_t(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("version", ctypes.c_uint),
        ("world_size", ctypes.c_int),
        ("dtype", _enum_t),
        ("max_tokens", ctypes.c_size_t),
        ("max_hidden", ctypes.c_size_t),
        ("oneshot_max_tokens", ctypes.c_size_t),
        ("sm_count", ctypes.c_int),
        ("ranks_per_device", ctypes.c_int),
        ("nccl", ctypes.c_int),
        ("max_ctas", ctypes.c_int),  # API version 6
    ]


class arfQuantBuffer_t(ctypes.Structure):
    _fields_ = [
        ("element", _enum_t),
        ("rank", ctypes.c_int),
        ("element_bytes", ctypes.c_size_t),
        ("dims", ctypes.c_size_t * 2),
        ("bytes", ctypes.c_size_t),
        ("tokens_align", ctypes.c_size_t * 2),
        ("tokens_scale", ctypes.c_size_t * 2),
        ("fixed", ctypes.c_size_t * 2),
    ]


class arfQuantOutputs_t(ctypes.Structure):
    _fields_ = [
        ("quant_out", arfQuantBuffer_t),
        ("scale_out", arfQuantBuffer_t),
    ]


STRUCTS = (arfUniqueId, arfCommConfig_t, arfFusedArgs_t, arfPlan_t, arfPlanFacts_t,
           arfQuantBuffer_t, arfQuantOutputs_t)
ENUMS = tuple(_ENUM_PREFIX)
# Integer constants of the header that the mirror relies on.
CONSTANTS = {
    "ARF_API_VERSION": ARF_API_VERSION,
    "ARF_MAX_RANKS": ARF_MAX_RANKS,
    "ARF_UNIQUE_ID_STRING_BYTES": ARF_UNIQUE_ID_STRING_BYTES,
}

arfComm_t = ctypes.c_void_p
_P = ctypes.POINTER
_status = ctypes.c_int

# name: (restype, argtypes). Every function of the header.
_PROTOTYPES = {
    "arfCommConfigInit": (None, [_P(arfCommConfig_t)]),
    "arfGetUniqueId": (_status, [_P(arfUniqueId)]),
    "arfUniqueIdToString": (_status, [_P(arfUniqueId), ctypes.c_char_p]),
    "arfUniqueIdFromString": (_status, [ctypes.c_char_p, _P(arfUniqueId)]),
    "arfCommConfigFromEnv": (_status, [_P(arfCommConfig_t)]),
    "arfCommInitRank": (_status, [_P(arfComm_t), _P(arfCommConfig_t)]),
    "arfCommInitRankFromNccl": (_status, [_P(arfComm_t), _P(arfCommConfig_t), ctypes.c_void_p,
                                          ctypes.c_void_p]),
    "arfCommInitAll": (_status, [_P(arfComm_t), ctypes.c_int, _P(ctypes.c_int), _P(arfCommConfig_t)]),
    "arfCommDestroy": (_status, [arfComm_t]),
    "arfCommGetRank": (_status, [arfComm_t, _P(ctypes.c_int)]),
    "arfCommGetWorldSize": (_status, [arfComm_t, _P(ctypes.c_int)]),
    "arfCommGetAsyncError": (_status, [arfComm_t]),
    "arfCommGetFirstLostCall": (_status, [arfComm_t, _P(ctypes.c_uint64)]),
    "arfCommWorkspaceBytes": (_status, [_P(arfCommConfig_t), _P(ctypes.c_size_t)]),
    "arfCommGetInputBuffer": (_status, [arfComm_t, _P(ctypes.c_void_p), _P(ctypes.c_size_t)]),
    "arfFusedArgsInit": (None, [_P(arfFusedArgs_t)]),
    "arfPlan": (_status, [arfComm_t, _P(arfFusedArgs_t), _P(arfPlan_t)]),
    "arfPlanShape": (_status, [arfComm_t, _P(arfFusedArgs_t), _P(arfPlan_t)]),
    "arfPlanFactsInit": (None, [_P(arfPlanFacts_t)]),
    "arfCommGetPlanFacts": (_status, [arfComm_t, _P(arfPlanFacts_t)]),
    "arfPlanFromFacts": (_status, [_P(arfPlanFacts_t), _P(arfFusedArgs_t), _P(arfPlan_t)]),
    "arfFusedAllReduce": (_status, [arfComm_t, _P(arfFusedArgs_t), ctypes.c_void_p]),
    "arfAllReduce": (_status, [arfComm_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, _enum_t,
                               ctypes.c_void_p]),
    "arfScaleBufferBytes": (ctypes.c_size_t, [_enum_t, _enum_t, _enum_t, ctypes.c_size_t,
                                              ctypes.c_size_t]),
    "arfQuantOutputLayout": (_status, [_enum_t, _enum_t, _enum_t, ctypes.c_size_t, ctypes.c_size_t,
                                       _P(arfQuantOutputs_t)]),
    "arfGetStatusString": (ctypes.c_char_p, [_status]),
    "arfGetLastErrorString": (ctypes.c_char_p, []),
    "arfAlgorithmName": (ctypes.c_char_p, [_enum_t]),
    "arfAlgorithmFromName": (_status, [ctypes.c_char_p, _P(_enum_t)]),
    "arfPatternName": (ctypes.c_char_p, [_enum_t]),
    "arfAbiQuery": (_status, [ctypes.c_char_p, _P(ctypes.c_int64)]),
    "arfAbiNames": (ctypes.c_char_p, []),
}

UINT64_MAX = (1 << 64) - 1


class ArfError(RuntimeError):
    """A failed arfusion call.

    Attributes: ``status`` (the arfStatus_t C name, e.g. "arfTimeout"), ``code`` (its value),
    ``message`` (arfGetLastErrorString, or the communicator's asynchronous error), ``function``
    (the C function that failed), ``first_lost_call`` (arfCommGetFirstLostCall after an
    asynchronous error: the first call whose outputs may be lost; None when not known).
    """

    def __init__(self, code: int, message: str, function: str | None = None,
                 first_lost_call: int | None = None, comm_name: str | None = None):
        self.code = int(code)
        self.status = status_name(code)
        self.message = message
        self.function = function
        self.first_lost_call = first_lost_call
        self.comm_name = comm_name
        parts = [f"{function}: " if function else "", self.status]
        if comm_name:
            parts.append(f" (communicator {comm_name!r})")
        parts.append(f": {message}" if message else "")
        if first_lost_call is not None:
            parts.append(f" [first lost call: {first_lost_call}]")
        super().__init__("".join(parts))


def find_library() -> pathlib.Path:
    """The path of the libarfusion.so this package loads (see the module docstring)."""
    env = os.environ.get("ARFUSION_LIBRARY")
    if env:
        p = pathlib.Path(env)
        if not p.is_file():
            raise ImportError(f"arfusion: ARFUSION_LIBRARY={env} is not a file")
        return p
    here = pathlib.Path(__file__).resolve().parent
    candidates = [here / "libarfusion.so", here.parent.parent / "build" / "libarfusion.so"]
    for p in candidates:
        if p.is_file():
            return p
    raise ImportError(
        "arfusion: libarfusion.so not found; looked at $ARFUSION_LIBRARY (unset), "
        + ", ".join(str(p) for p in candidates)
        + ". Build it (cmake --build build --target arfusion_shared) or set ARFUSION_LIBRARY.")


def _bind(lib: ctypes.CDLL, path) -> None:
    missing = []
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if missing:
        raise ImportError(
            f"arfusion: {path} lacks {', '.join(missing)}: it was built from an older arfusion "
            f"than this package (API version {ARF_API_VERSION}); rebuild the library")


def abi_names(lib: ctypes.CDLL) -> list[str]:
    raw = lib.arfAbiNames()
    return [line for line in (raw or b"").decode().splitlines() if line]


def abi_query(lib: ctypes.CDLL, name: str) -> int | None:
    """The library's answer for `name`, or None when it does not know the name."""
    value = ctypes.c_int64(0)
    status = lib.arfAbiQuery(name.encode(), ctypes.byref(value))
    if status != Status.Success:
        return None
    return value.value


def abi_mismatches(lib: ctypes.CDLL) -> list[str]:
    """Every difference between the mirrors of this module and the library: [] when they agree."""
    problems = []
    known = set(abi_names(lib))

    def expect(name, ours):
        theirs = abi_query(lib, name)
        if theirs is None:
            problems.append(f"{name}: the library does not answer it (binding has {ours})")
        elif theirs != ours:
            problems.append(f"{name}: library {theirs}, binding {ours}")

    for cname, value in CONSTANTS.items():
        expect(cname, value)
    for struct in STRUCTS:
        sname = struct.__name__
        expect(sname, ctypes.sizeof(struct))
        ours = set()
        for fname, *_ in struct._fields_:
            ours.add(f"{sname}.{fname}")
            expect(f"{sname}.{fname}", getattr(struct, fname).offset)
        # A field the library has that the mirror lacks (sizes may still agree through padding).
        for name in sorted(known):
            if name.startswith(sname + ".") and name not in ours:
                problems.append(f"{name}: in the library, not in the binding's mirror")
    for enum_type in ENUMS:
        for member in enum_type:
            expect(enum_c_name(member), int(member))
    return problems


class _Library:
    """The loaded library: `.lib` (the CDLL with prototypes), `.path`."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        try:
            self.lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise ImportError(f"arfusion: cannot load {path}: {e}") from e
        _bind(self.lib, path)
        problems = abi_mismatches(self.lib)
        if problems:
            raise ImportError(f"arfusion: the binding's mirrors do not match {path}:\n  "
                              + "\n  ".join(problems))


_loaded: _Library | None = None
_load_lock = threading.Lock()


def library() -> _Library:
    global _loaded
    if _loaded is None:
        with _load_lock:
            if _loaded is None:
                _loaded = _Library(find_library())
    return _loaded


def last_error() -> str:
    raw = library().lib.arfGetLastErrorString()
    return (raw or b"").decode(errors="replace")


def check(status: int, function: str) -> None:
    """Raises ArfError for a failed status, with the calling thread's last error message."""
    if status != Status.Success:
        raise ArfError(status, last_error(), function)
