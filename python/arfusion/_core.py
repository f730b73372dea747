"""The torch-free API over the C library: names, rendezvous ids, configs, plans, the quantized
outputs' layout, and the communicator handle with raw device pointers (``Comm``). ``arfusion``
re-exports what is public here."""

from __future__ import annotations

import ctypes
import dataclasses
import functools

from . import _lib
from ._lib import (Algorithm, ArfError, ElementType, Status, UINT64_MAX, arfCommConfig_t,
                   arfFusedArgs_t, arfPlan_t, arfPlanFacts_t, arfQuantOutputs_t, arfUniqueId,
                   status_name)

_library = _lib.library()  # ImportError here if the library is missing or does not match
_c = _library.lib
library_path = str(_library.path)


def _check(status: int, function: str) -> None:
    _lib.check(status, function)


# ---- names and strings -----------------------------------------------------------------------------


def status_string(status: int) -> str:
    """arfGetStatusString: a short description ("timeout")."""
    return _c.arfGetStatusString(int(status)).decode()


def algorithm_name(algorithm: int) -> str:
    return _c.arfAlgorithmName(int(algorithm)).decode()


def algorithm_from_name(name: str) -> Algorithm:
    value = ctypes.c_int(0)
    _check(_c.arfAlgorithmFromName(name.encode(), ctypes.byref(value)), "arfAlgorithmFromName")
    return Algorithm(value.value)


def pattern_name(pattern: int) -> str:
    return _c.arfPatternName(int(pattern)).decode()


def abi_names() -> list[str]:
    """Every name arfAbiQuery answers."""
    return _lib.abi_names(_c)


def abi_query(name: str) -> int:
    value = _lib.abi_query(_c, name)
    if value is None:
        raise ArfError(Status.InvalidArgument, _lib.last_error(), "arfAbiQuery")
    return value


# ---- rendezvous ids ----------------------------------------------------------------------------


def unique_id() -> arfUniqueId:
    uid = arfUniqueId()
    _check(_c.arfGetUniqueId(ctypes.byref(uid)), "arfGetUniqueId")
    return uid


def unique_id_to_string(uid: arfUniqueId) -> str:
    buf = ctypes.create_string_buffer(_lib.ARF_UNIQUE_ID_STRING_BYTES)
    _check(_c.arfUniqueIdToString(ctypes.byref(uid), buf), "arfUniqueIdToString")
    return buf.value.decode()


def unique_id_from_string(text: str) -> arfUniqueId:
    uid = arfUniqueId()
    _check(_c.arfUniqueIdFromString(text.encode(), ctypes.byref(uid)), "arfUniqueIdFromString")
    return uid


def new_unique_id_string() -> str:
    """A fresh rendezvous id as the 32 hex digits another process hands to unique_id_from_string."""
    return unique_id_to_string(unique_id())


# ---- configs, facts, plans ----------------------------------------------------------------------


def comm_config(**fields) -> arfCommConfig_t:
    """arfCommConfigInit defaults, then the given fields (C names: max_tokens=..., dtype=...)."""
    cfg = arfCommConfig_t()
    _c.arfCommConfigInit(ctypes.byref(cfg))
    for k, v in fields.items():
        if not hasattr(cfg, k) or k in ("struct_size", "version"):
            raise TypeError(f"arfCommConfig_t has no settable field {k!r}")
        setattr(cfg, k, int(v) if isinstance(v, bool) else v)
    return cfg


def fused_args(**fields) -> arfFusedArgs_t:
    """arfFusedArgsInit defaults, then the given fields (C names)."""
    args = arfFusedArgs_t()
    _c.arfFusedArgsInit(ctypes.byref(args))
    for k, v in fields.items():
        if not hasattr(args, k) or k in ("struct_size", "version"):
            raise TypeError(f"arfFusedArgs_t has no settable field {k!r}")
        setattr(args, k, int(v) if isinstance(v, bool) else v)
    return args


def plan_facts(**fields) -> arfPlanFacts_t:
    """arfPlanFactsInit defaults, then the given fields."""
    facts = arfPlanFacts_t()
    _c.arfPlanFactsInit(ctypes.byref(facts))
    for k, v in fields.items():
        if not hasattr(facts, k) or k in ("struct_size", "version"):
            raise TypeError(f"arfPlanFacts_t has no settable field {k!r}")
        setattr(facts, k, int(v) if isinstance(v, bool) else v)
    return facts


def workspace_bytes(config: arfCommConfig_t) -> int:
    """arfCommWorkspaceBytes: device bytes arfCommInitRank allocates for this config."""
    out = ctypes.c_size_t(0)
    _check(_c.arfCommWorkspaceBytes(ctypes.byref(config), ctypes.byref(out)), "arfCommWorkspaceBytes")
    return out.value


@dataclasses.dataclass(frozen=True)
class Plan:
    algorithm: str
    inner_allreduce: str
    num_kernels: int
    grid: int
    block: int
    forced: bool
    reason: str
    fallback_level: int

    @classmethod
    def _from_c(cls, p: arfPlan_t) -> "Plan":
        return cls(algorithm_name(p.algorithm), algorithm_name(p.inner_allreduce), p.num_kernels,
                   p.grid, p.block, bool(p.forced), p.reason.decode(errors="replace"),
                   p.fallback_level)

    @property
    def fused(self) -> bool:
        """True when the call runs a fused kernel (not the unfused or nccl algorithms)."""
        return self.algorithm not in ("unfused", "nccl")


def plan_from_facts(facts: arfPlanFacts_t, args: arfFusedArgs_t) -> Plan:
    """arfPlanFromFacts: the plan a communicator with these facts makes (no GPU needed)."""
    p = arfPlan_t()
    _check(_c.arfPlanFromFacts(ctypes.byref(facts), ctypes.byref(args), ctypes.byref(p)),
           "arfPlanFromFacts")
    return Plan._from_c(p)


def scale_buffer_bytes(pattern: int, layout: int, scale_format: int, num_tokens: int,
                       hidden: int) -> int:
    """arfScaleBufferBytes: bytes of scale_out (0 where the pattern writes none or cannot run)."""
    return int(_c.arfScaleBufferBytes(int(pattern), int(layout), int(scale_format), int(num_tokens),
                                      int(hidden)))


# ---- the quantized outputs' layout ----------------------------------------------------------------

# arfElementType_t as the dtype names torch and numpy use.
ELEMENT_NAMES = {ElementType.Float32: "float32", ElementType.Float8E4M3: "float8_e4m3fn",
                 ElementType.UInt8: "uint8"}


@dataclasses.dataclass(frozen=True)
class BufferLayout:
    """One output buffer of a quantized pattern (arfQuantBuffer_t): a row-major array of
    ``element`` ("float32", "float8_e4m3fn" or "uint8"), ``shape`` for the token count asked and
    ``bytes`` in all; ``dims`` gives each dimension for any token count T as (tokens_align,
    tokens_scale, fixed): tokens_scale * round_up(T, tokens_align) + fixed."""

    element: str
    element_bytes: int
    shape: tuple
    bytes: int
    dims: tuple

    def shape_for(self, num_tokens) -> tuple:
        """The shape for `num_tokens` rows; num_tokens may be a symbolic integer (a torch SymInt
        while tracing), the fixed dimensions stay ints."""
        out = []
        for align, scale, fixed in self.dims:
            if scale == 0:
                out.append(fixed)
                continue
            rows = num_tokens if align == 1 else (num_tokens + align - 1) // align * align
            out.append(rows * scale + fixed if fixed else rows * scale)
        return tuple(out)

    @classmethod
    def _from_c(cls, b) -> "BufferLayout":
        rank = int(b.rank)
        return cls(ELEMENT_NAMES[ElementType(b.element)], int(b.element_bytes),
                   tuple(int(b.dims[i]) for i in range(rank)), int(b.bytes),
                   tuple((int(b.tokens_align[i]), int(b.tokens_scale[i]), int(b.fixed[i]))
                         for i in range(rank)))


@dataclasses.dataclass(frozen=True)
class QuantOutputs:
    quant_out: BufferLayout
    scale_out: BufferLayout


@functools.lru_cache(maxsize=1024)
def quant_output_layout(pattern: int, layout: int, scale_format: int, num_tokens: int,
                        hidden: int) -> QuantOutputs:
    """arfQuantOutputLayout: shapes, element types and bytes of quant_out and scale_out of a
    quantized pattern for num_tokens x hidden. ArfError (arfInvalidArgument, with the library's
    reason) for a pattern that does not quantize or a layout, format or hidden size it cannot
    take."""
    out = arfQuantOutputs_t()
    _check(_c.arfQuantOutputLayout(int(pattern), int(layout), int(scale_format), int(num_tokens),
                                   int(hidden), ctypes.byref(out)), "arfQuantOutputLayout")
    return QuantOutputs(BufferLayout._from_c(out.quant_out), BufferLayout._from_c(out.scale_out))


# ---- the communicator handle (raw pointers; arfusion.torch wraps it) ----------------------------


class Comm:
    """One rank's arfComm_t. Raw device pointers and streams are ints (cudaStream_t, 0 = legacy).

    Create with ``Comm.init_rank(config)`` (every rank of the id, one process or thread each) or
    ``Comm.init_rank_from_nccl(config, nccl_comm, stream)``. Collective destroy: ``destroy()``.
    After a failure, ``check()`` raises the communicator's asynchronous error if it has one.
    """

    def __init__(self, handle: int, name: str | None = None):
        self._handle = ctypes.c_void_p(handle)
        self.name = name
        r, w = ctypes.c_int(0), ctypes.c_int(0)
        _check(_c.arfCommGetRank(self._handle, ctypes.byref(r)), "arfCommGetRank")
        _check(_c.arfCommGetWorldSize(self._handle, ctypes.byref(w)), "arfCommGetWorldSize")
        self.rank, self.world_size = r.value, w.value

    @classmethod
    def init_rank(cls, config: arfCommConfig_t, name: str | None = None) -> "Comm":
        handle = ctypes.c_void_p(None)
        _check(_c.arfCommInitRank(ctypes.byref(handle), ctypes.byref(config)), "arfCommInitRank")
        return cls(handle.value, name)

    @classmethod
    def init_rank_from_nccl(cls, config: arfCommConfig_t, nccl_comm: int, stream: int = 0,
                            name: str | None = None) -> "Comm":
        handle = ctypes.c_void_p(None)
        _check(_c.arfCommInitRankFromNccl(ctypes.byref(handle), ctypes.byref(config),
                                          ctypes.c_void_p(nccl_comm), ctypes.c_void_p(stream)),
               "arfCommInitRankFromNccl")
        return cls(handle.value, name)

    @property
    def handle(self) -> int:
        if not self._handle.value:
            raise ArfError(Status.InvalidArgument, "the communicator was destroyed", None,
                           comm_name=self.name)
        return self._handle.value

    @property
    def alive(self) -> bool:
        return bool(self._handle.value)

    def destroy(self) -> None:
        """arfCommDestroy (collective). A second call does nothing."""
        if self._handle.value:
            h, self._handle = self._handle, ctypes.c_void_p(None)
            _check(_c.arfCommDestroy(h), "arfCommDestroy")

    def input_buffer(self) -> tuple[int, int]:
        """arfCommGetInputBuffer: (device pointer, bytes) of this rank's input buffer, which peers
        read in place: a call whose input is exactly this pointer skips its copy-in."""
        ptr, size = ctypes.c_void_p(None), ctypes.c_size_t(0)
        _check(_c.arfCommGetInputBuffer(ctypes.c_void_p(self.handle), ctypes.byref(ptr), ctypes.byref(size)),
               "arfCommGetInputBuffer")
        return int(ptr.value or 0), int(size.value)

    # -- health --
    def first_lost_call(self) -> int | None:
        call = ctypes.c_uint64(0)
        status = _c.arfCommGetFirstLostCall(ctypes.c_void_p(self.handle), ctypes.byref(call))
        if status != Status.Success:
            return None
        return None if call.value == UINT64_MAX else call.value

    def async_error(self) -> ArfError | None:
        """The communicator's asynchronous error as an ArfError, or None while healthy."""
        status = _c.arfCommGetAsyncError(ctypes.c_void_p(self.handle))
        if status == Status.Success:
            return None
        return ArfError(status, _lib.last_error(), "arfCommGetAsyncError", self.first_lost_call(),
                        self.name)

    def check(self) -> None:
        """Raises the asynchronous error, if any (no synchronization)."""
        err = self.async_error()
        if err is not None:
            raise err

    def raise_failure(self, status: int, function: str) -> None:
        """Raises for a failed call: the call's own message, plus the communicator's asynchronous
        error (status and message) and the first lost call when there is one."""
        message = _lib.last_error()
        async_status = _c.arfCommGetAsyncError(ctypes.c_void_p(self.handle))
        lost = None
        if async_status != Status.Success:
            async_message = _lib.last_error()
            lost = self.first_lost_call()
            if async_message and async_message not in message:
                message = (f"{message}; asynchronous error {status_name(async_status)}: "
                           f"{async_message}")
            if status == Status.CommFailed:
                status = async_status  # the cause, not the refusal
        raise ArfError(status, message, function, lost, self.name)

    # -- facts and plans --
    def plan_facts(self) -> arfPlanFacts_t:
        facts = plan_facts()
        status = _c.arfCommGetPlanFacts(ctypes.c_void_p(self.handle), ctypes.byref(facts))
        if status != Status.Success:
            self.raise_failure(status, "arfCommGetPlanFacts")
        return facts

    def plan_shape(self, args: arfFusedArgs_t) -> Plan:
        """arfPlanShape: the plan of a call of this shape (pointers ignored)."""
        p = arfPlan_t()
        status = _c.arfPlanShape(ctypes.c_void_p(self.handle), ctypes.byref(args), ctypes.byref(p))
        if status != Status.Success:
            raise ArfError(status, _lib.last_error(), "arfPlanShape", comm_name=self.name)
        return Plan._from_c(p)

    def plan(self, args: arfFusedArgs_t) -> Plan:
        """arfPlan: validates the pointers too."""
        p = arfPlan_t()
        status = _c.arfPlan(ctypes.c_void_p(self.handle), ctypes.byref(args), ctypes.byref(p))
        if status != Status.Success:
            raise ArfError(status, _lib.last_error(), "arfPlan", comm_name=self.name)
        return Plan._from_c(p)

    # -- operations (stream-ordered) --
    def fused_all_reduce(self, args: arfFusedArgs_t, stream: int) -> None:
        status = _c.arfFusedAllReduce(ctypes.c_void_p(self.handle), ctypes.byref(args),
                                      ctypes.c_void_p(stream))
        if status != Status.Success:
            self.raise_failure(status, "arfFusedAllReduce")

    def all_reduce(self, src: int, dst: int, count: int, dtype: int, stream: int) -> None:
        status = _c.arfAllReduce(ctypes.c_void_p(self.handle), ctypes.c_void_p(src),
                                 ctypes.c_void_p(dst), count, int(dtype), ctypes.c_void_p(stream))
        if status != Status.Success:
            self.raise_failure(status, "arfAllReduce")
