"""Communicators for torch: creation over torch.distributed, the name registry, and the ops'
convenience methods."""

from __future__ import annotations

import ctypes
import datetime
import functools
import itertools
import operator
import threading

import torch
import torch.distributed as dist

import arfusion as _arf
from arfusion import _lib, _opargs
from arfusion._lib import ArfError, DataType, Status

from . import _oplib, ops  # noqa: F401  (ops: the schemas and fakes exist before any call)
from ._errors import translate_error

TORCH_TO_ARF_DTYPE = {
    torch.bfloat16: DataType.BFloat16,
    torch.float16: DataType.Float16,
    torch.float32: DataType.Float32,
}
ACTIVATION_DTYPES = (torch.bfloat16, torch.float16)

_registry: dict[str, "Communicator"] = {}
_registry_lock = threading.Lock()
_gloo_groups: dict[tuple, object] = {}
_nccl_counter = itertools.count()


def get_communicator(name: str) -> "Communicator":
    """The live communicator registered under `name` in this process (ops resolve it so)."""
    comm = _registry.get(name)
    if comm is None:
        known = ", ".join(repr(k) for k in sorted(_registry)) or "none"
        raise RuntimeError(
            f"arfusion: no communicator named {name!r} in this process (registered: {known}); "
            "create it with arfusion.torch.Communicator.from_group(..., name=...) before running "
            "the model (a compiled graph refers to communicators by name)")
    return comm


def registered_communicators() -> dict[str, "Communicator"]:
    return dict(_registry)


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _arf_dtype(dtype: torch.dtype) -> DataType:
    if dtype not in ACTIVATION_DTYPES:
        raise ValueError(f"arfusion: activation dtype must be torch.bfloat16 or torch.float16, not {dtype}")
    return TORCH_TO_ARF_DTYPE[dtype]


def _backend_has_gloo(group) -> bool:
    try:
        return "gloo" in str(dist.get_backend(group)).lower()
    except Exception:  # noqa: BLE001 - a group without a queryable backend is not usable here
        return False


def _cpu_group(group, ranks: list[int], cpu_group, timeout_s: float):
    """A gloo group over `ranks`: the given cpu_group, the group itself when it is gloo, or a new
    one (dist.new_group is collective over the default group: every process must reach it)."""
    if cpu_group is not None:
        return cpu_group
    if _backend_has_gloo(group):
        return group
    key = tuple(ranks)
    g = _gloo_groups.get(key)
    if g is None:
        g = dist.new_group(ranks, backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
        _gloo_groups[key] = g
    return g


_C_INT_MAX = 2**31 - 1


def _checked_max_ctas(max_ctas) -> int:
    """arfCommConfig_t::max_ctas from a creation argument: an int >= 0 (0: no bound). ValueError
    otherwise, in the library's words for a negative bound (it refuses one as arfInvalidArgument);
    a bool or float is refused as not meant, a bound beyond the field's C int as one that ctypes
    would store wrapped."""
    if isinstance(max_ctas, bool):
        raise ValueError(f"arfusion: max_ctas must be an int >= 0 (0: no bound), not {max_ctas!r}")
    try:
        value = operator.index(max_ctas)
    except TypeError:
        raise ValueError(f"arfusion: max_ctas must be an int >= 0 (0: no bound), not "
                         f"{max_ctas!r}") from None
    if value < 0:
        raise ValueError(f"arfusion: max_ctas {value} must be >= 0 (0: no bound)")
    if value > _C_INT_MAX:
        raise ValueError(f"arfusion: max_ctas {value} does not fit arfCommConfig_t::max_ctas "
                         f"(at most {_C_INT_MAX}; 0: no bound)")
    return value


def _op_errors(method):
    """A Communicator method calling torch.ops.arfusion.*: the kernels' RuntimeErrors raised as
    the ArfError / ValueError they stand for (translate_error)."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except RuntimeError as e:
            t = translate_error(e)
            if t is e:
                raise
            raise t from None

    return call


class Communicator:
    """One rank of an arfusion communicator, usable from torch.

    Create with ``Communicator.from_group(group, ...)`` (every rank of the group calls it) or
    ``Communicator.from_nccl(nccl_comm_ptr, ...)``. The communicator is registered under ``name``
    (identical on every rank) so that ``torch.ops.arfusion.*`` and compiled graphs can name it;
    ``destroy()`` (or leaving a ``with`` block) unregisters and releases it (collective).

    All ops run on the current torch CUDA stream; one communicator must be driven from one
    thread and one stream at a time (arfusion.h, "Streams"). Errors are ``arfusion.ArfError``.
    """

    def __init__(self, comm: _arf.Comm, *, name: str, device: torch.device, dtype: torch.dtype,
                 config: _arf.arfCommConfig_t, cpu_group=None, ranks: list[int] | None = None):
        self._comm = comm
        self._handle = ctypes.c_void_p(comm.handle)
        self.name = name
        self.device = device
        self.dtype = dtype
        self.rank = comm.rank
        self.world_size = comm.world_size
        self.max_tokens = int(config.max_tokens)
        self.max_hidden = int(config.max_hidden)
        self._config = config
        self.cpu_group = cpu_group
        # Global ranks of the torch.distributed group (from_group), None when unknown (from_nccl):
        # the compile pass maps c10d all-reduces to communicators by them.
        self.ranks = list(ranks) if ranks is not None else None
        self._arf_dtype = TORCH_TO_ARF_DTYPE[dtype]
        with _registry_lock:
            if name in _registry:
                raise RuntimeError(f"arfusion: a communicator named {name!r} already exists")
            _oplib.register_comm(name, self._handle.value, device.index)  # the kernels' names
            _registry[name] = self

    # ---- creation -----------------------------------------------------------------------------

    @staticmethod
    def _config(*, rank: int, world_size: int, device_index: int, dtype: torch.dtype,
                max_tokens: int, max_hidden: int, timeout_s, init_timeout_s, oneshot_max_tokens,
                programmatic_launch: bool, verify_calls: bool, max_ctas: int = 0, uid=None):
        """The arfCommConfig_t of a creation (ipc transport); ValueError for a bad max_ctas."""
        fields = dict(transport=_lib.Transport.Ipc, rank=rank, world_size=world_size,
                      device=device_index, max_tokens=int(max_tokens), max_hidden=int(max_hidden),
                      dtype=int(_arf_dtype(dtype)), oneshot_max_tokens=int(oneshot_max_tokens or 0),
                      timeout_seconds=float(timeout_s or 0.0),
                      init_timeout_seconds=float(init_timeout_s or 0.0),
                      programmatic_launch=int(bool(programmatic_launch)),
                      verify_calls=int(bool(verify_calls)),
                      max_ctas=_checked_max_ctas(max_ctas))
        if uid is not None:
            fields["id"] = uid
        return _arf.comm_config(**fields)

    @classmethod
    def from_group(cls, group=None, *, max_tokens: int, max_hidden: int,
                   dtype: torch.dtype = torch.bfloat16, timeout_s: float | None = None,
                   init_timeout_s: float | None = None, name: str | None = None,
                   oneshot_max_tokens: int = 0, programmatic_launch: bool = False,
                   verify_calls: bool = False, max_ctas: int = 0,
                   cpu_group=None) -> "Communicator":
        """Collective over `group` (default: the world): every rank calls it with the same
        arguments. Rank 0 of the group draws the rendezvous id and hands it to the others over a
        gloo group of the same ranks (`cpu_group`, the group itself when it is gloo, or one made
        with dist.new_group(ranks, backend="gloo"), which every process of the default group must
        reach); every rank then joins over the ipc transport on its current CUDA device. A
        failure on any rank raises ArfError on every rank. Refused during CUDA-graph capture.

        name: the registry name, identical on every rank (default "arfusion:<ranks>").
        timeout_s: bound of every device-side wait (0/None: the library's 10 s);
        init_timeout_s: bound of the rendezvous (None: 60 s).
        max_ctas: arfCommConfig_t::max_ctas, the most CTAs one call keeps on a GPU at once,
        counting every rank of this communicator on that GPU (0, the default: no bound). Every
        kernel of every algorithm keeps to it (nccl's through ncclConfig_t.maxCTAs), so a call
        occupies at most that many SMs and the rest stay free for other spinning kernels (another
        communicator, NCCL's, DeepEP's): bound each party so that together they fit on the GPU
        (arfusion.h, Co-residency). Identical on every rank (creation fails on every rank
        otherwise); a bound too small for the algorithms makes auto fall back or the call be
        refused, with the reason (plan()). Not an int >= 0: ValueError on the calling rank,
        before anything collective.
        """
        max_ctas = _checked_max_ctas(max_ctas)
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("arfusion: Communicator.from_group needs an initialised "
                               "torch.distributed (dist.init_process_group)")
        if group is None:
            group = dist.group.WORLD
        ranks = list(dist.get_process_group_ranks(group))
        world = len(ranks)
        rank = dist.get_rank(group)
        if rank < 0:
            raise RuntimeError("arfusion: this process is not a member of the group")
        if name is None:
            name = "arfusion:" + ",".join(str(r) for r in ranks)
        gather_timeout = float(init_timeout_s or 60.0) + 60.0
        cpu = _cpu_group(group, ranks, cpu_group, gather_timeout)

        # Round 1: every rank's local problems, and rank 0's id (one all_gather).
        problem = None
        if _capturing():
            problem = "creation during CUDA-graph capture is not allowed (create communicators before capturing)"
        elif not torch.cuda.is_available():
            problem = "no CUDA device visible"
        elif name in _registry:
            problem = f"a communicator named {name!r} already exists in this process"
        elif dtype not in ACTIVATION_DTYPES:
            problem = f"dtype must be torch.bfloat16 or torch.float16, not {dtype}"
        uid_text = None
        if rank == 0 and problem is None:
            try:
                uid_text = _arf.new_unique_id_string()
            except ArfError as e:
                problem = str(e)
        gathered = [None] * world
        dist.all_gather_object(gathered, (problem, uid_text), group=cpu)
        problems = [(r, p) for r, (p, _) in enumerate(gathered) if p is not None]
        if problems:
            detail = "; ".join(f"rank {r}: {p}" for r, p in problems)
            raise ArfError(Status.InvalidArgument, f"communicator {name!r} not created: {detail}",
                           "Communicator.from_group", comm_name=name)
        uid_text = gathered[0][1]

        # Round 2: every rank joins; all agree on the outcome.
        device = torch.device("cuda", torch.cuda.current_device())
        comm = None
        outcome = None
        try:
            cfg = cls._config(rank=rank, world_size=world, device_index=device.index, dtype=dtype,
                              max_tokens=max_tokens, max_hidden=max_hidden, timeout_s=timeout_s,
                              init_timeout_s=init_timeout_s, oneshot_max_tokens=oneshot_max_tokens,
                              programmatic_launch=programmatic_launch, verify_calls=verify_calls,
                              max_ctas=max_ctas, uid=_arf.unique_id_from_string(uid_text))
            torch.cuda.init()  # torch and the library share the device's primary context
            comm = _arf.Comm.init_rank(cfg, name)
        except ArfError as e:
            outcome = (e.code, e.message)
        except Exception as e:  # noqa: BLE001 - reported to every rank, then re-raised below
            outcome = (int(Status.InvalidArgument), f"{type(e).__name__}: {e}")
        outcomes = [None] * world
        dist.all_gather_object(outcomes, outcome, group=cpu)
        failed = [(r, o) for r, o in enumerate(outcomes) if o is not None]
        if failed:
            if comm is not None:
                try:
                    comm.destroy()
                except ArfError:
                    pass
            code = failed[0][1][0]
            detail = "; ".join(f"rank {r}: {_lib.status_name(o[0])}: {o[1]}" for r, o in failed)
            raise ArfError(code, f"communicator {name!r} not created: {detail}",
                           "Communicator.from_group", comm_name=name)
        return cls(comm, name=name, device=device, dtype=dtype, config=cfg, cpu_group=cpu,
                   ranks=ranks)

    @classmethod
    def from_nccl(cls, nccl_comm: int, *, max_tokens: int, max_hidden: int,
                  dtype: torch.dtype = torch.bfloat16, timeout_s: float | None = None,
                  init_timeout_s: float | None = None, name: str | None = None,
                  oneshot_max_tokens: int = 0, programmatic_launch: bool = False,
                  verify_calls: bool = False, max_ctas: int = 0) -> "Communicator":
        """arfCommInitRankFromNccl: `nccl_comm` is the address of an ncclComm_t (an int; e.g.
        vLLM's PyNcclCommunicator.comm.value), one process per GPU. Collective over the NCCL
        communicator's ranks; rank, world and device are the NCCL communicator's; the id travels
        by ncclBroadcast on the current stream. The library makes every rank agree on failure.
        name: identical on every rank (default "arfusion:nccl:<n>", n counting such calls).
        max_ctas: the bound on a call's CTAs per GPU, as for from_group (0: no bound); ValueError
        before anything collective when it is not an int >= 0."""
        max_ctas = _checked_max_ctas(max_ctas)
        if _capturing():
            raise RuntimeError("arfusion: creation during CUDA-graph capture is not allowed")
        if hasattr(nccl_comm, "value"):  # a ctypes pointer
            nccl_comm = nccl_comm.value
        ptr = int(nccl_comm)
        if not ptr:
            raise ValueError("arfusion: from_nccl needs a non-null ncclComm_t")
        if name is None:
            name = f"arfusion:nccl:{next(_nccl_counter)}"
        if name in _registry:
            raise RuntimeError(f"arfusion: a communicator named {name!r} already exists")
        torch.cuda.init()
        cfg = cls._config(rank=0, world_size=1, device_index=torch.cuda.current_device(),
                          dtype=dtype, max_tokens=max_tokens, max_hidden=max_hidden,
                          timeout_s=timeout_s, init_timeout_s=init_timeout_s,
                          oneshot_max_tokens=oneshot_max_tokens,
                          programmatic_launch=programmatic_launch, verify_calls=verify_calls,
                          max_ctas=max_ctas)
        stream = torch.cuda.current_stream().cuda_stream
        comm = _arf.Comm.init_rank_from_nccl(cfg, ptr, stream, name)
        # The NCCL communicator decides rank and world; keep them for workspace_bytes.
        cfg.rank, cfg.world_size = comm.rank, comm.world_size
        return cls(comm, name=name, device=torch.device("cuda", torch.cuda.current_device()),
                   dtype=dtype, config=cfg)

    # ---- lifetime -----------------------------------------------------------------------------

    def destroy(self) -> None:
        """arfCommDestroy (collective: every rank calls it) and unregister. Idempotent."""
        with _registry_lock:
            if _registry.get(self.name) is self:
                del _registry[self.name]
                _oplib.unregister_comm(self.name)  # before the handle dies
        if self._comm.alive:
            self._handle = ctypes.c_void_p(None)
            self._comm.destroy()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    @property
    def alive(self) -> bool:
        return self._comm.alive

    def __repr__(self) -> str:
        state = "alive" if self.alive else "destroyed"
        return (f"Communicator({self.name!r}, rank {self.rank}/{self.world_size}, {self.device}, "
                f"{self.dtype}, max_tokens={self.max_tokens}, max_hidden={self.max_hidden}, {state})")

    # ---- queries ------------------------------------------------------------------------------

    @property
    def workspace_bytes(self) -> int:
        """Device bytes this rank's workspace takes (arfCommWorkspaceBytes)."""
        return _arf.workspace_bytes(self._config)

    def input_buffer(self, num_tokens: int, hidden: int) -> "torch.Tensor":
        """A [num_tokens, hidden] tensor of the communicator's dtype over this rank's input buffer
        (arfCommGetInputBuffer): write a layer's partial sums there (e.g. ``torch.matmul(..., out=
        buf)``) and pass ``buf`` as the next call's input, and peers read it in place instead of
        the call copying it into the workspace first. Results are the same bits either way. Only
        the input of a call may live there (outputs aliasing it are refused: peers read it while
        the call runs), a call with its input elsewhere may overwrite it, and the tensor is valid
        only while the communicator lives (it does not own the memory)."""
        elem = 2
        ptr, size = self._comm.input_buffer()
        need = int(num_tokens) * int(hidden) * elem
        if num_tokens < 0 or hidden <= 0 or need > size:
            raise ValueError(f"arfusion: input_buffer({num_tokens}, {hidden}) needs {need} bytes; the "
                             f"buffer holds {size} (max_tokens x max_hidden)")

        class _View:  # the CUDA array interface, version 3: torch.as_tensor maps it without a copy
            __cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False),
                                        "version": 3, "strides": None}

        raw = torch.as_tensor(_View(), device=self.device)
        return raw[:need].view(self.dtype).view(int(num_tokens), int(hidden))

    def plan_facts(self) -> dict:
        f = self._comm.plan_facts()
        return {name: getattr(f, name) for name, *_ in f._fields_ if name not in ("struct_size", "version")}

    def check(self) -> None:
        """Raises ArfError for the communicator's asynchronous error (status, message, first lost
        call), if any. No synchronization."""
        self._comm.check()

    def first_lost_call(self) -> int | None:
        return self._comm.first_lost_call()

    def shape_args(self, pattern: int, hidden: int, num_tokens: int, *,
                   dtype: torch.dtype | None = None,
                   gamma_dtype: torch.dtype | None = None, gamma_plus_one: bool = False,
                   eps: float = 1e-6, norm_rounding: int = 0, algorithm: int = 0,
                   scale_layout: int = 0, scale_format: int = 0,
                   fallback: int = 0, scale_rule: int = 0,
                   sandwich: bool = False) -> _arf.arfFusedArgs_t:
        """An arfFusedArgs_t describing a call's shape (no pointers but post_gamma's dummy 1 for a
        sandwich call: the planner reads whether it is NULL), for plans. dtype: the activation
        dtype of the call (default the communicator's; another one is the library's to
        refuse)."""
        adt = _arf_dtype(dtype) if dtype is not None else self._arf_dtype
        gdt = TORCH_TO_ARF_DTYPE[gamma_dtype] if gamma_dtype is not None else adt
        return _arf.fused_args(pattern=int(pattern), algorithm=int(algorithm),
                               dtype=int(adt), num_tokens=int(num_tokens),
                               hidden=int(hidden), gamma_dtype=int(gdt),
                               gamma_plus_one=int(bool(gamma_plus_one)), eps=float(eps),
                               scale_layout=int(scale_layout), scale_format=int(scale_format),
                               fallback=int(fallback), norm_rounding=int(norm_rounding),
                               scale_rule=int(scale_rule), post_gamma=1 if sandwich else None)

    def plan(self, num_tokens: int, hidden: int, *, quant: str | None = None,
             gamma_dtype: torch.dtype | None = None, gamma_plus_one: bool = False,
             norm_rounding: str = "once", algorithm: str = "auto",
             scale_layout: str = "row_major", scale_format: str = "fp32",
             fallback: int = 0, allreduce: bool = False,
             scale_rule: str = "divide", sandwich: bool = False) -> _arf.Plan:
        """arfPlanShape for a call of this shape: which algorithm, grid and kernels it would run
        (identical on every rank). sandwich: a call with post_weight. Raises ArfError where the
        call would be refused."""
        pattern = (_lib.Pattern.AllReduce if allreduce else _opargs.quant_pattern(quant))
        args = self.shape_args(pattern, hidden, num_tokens, gamma_dtype=gamma_dtype,
                               gamma_plus_one=gamma_plus_one,
                               norm_rounding=_opargs.norm_rounding_value(norm_rounding),
                               algorithm=_opargs.algorithm_value(algorithm),
                               scale_layout=_opargs.scale_layout_value(scale_layout),
                               scale_format=_opargs.scale_format_value(scale_format),
                               fallback=fallback, scale_rule=_opargs.scale_rule_value(scale_rule),
                               sandwich=sandwich)
        return self._comm.plan_shape(args)

    def plan_shape(self, args: _arf.arfFusedArgs_t) -> _arf.Plan:
        return self._comm.plan_shape(args)

    # ---- convenience wrappers over torch.ops.arfusion ----------------------------------------

    @_op_errors
    def fused_add_rms_norm(self, input, residual, weight, eps: float = 1e-6, *,
                           gamma_plus_one: bool = False, norm_rounding: str = "once",
                           algorithm: str = "auto") -> None:
        """In place (vLLM/SGLang fused_add_rms_norm convention): residual := all_reduce(input) +
        residual; input := RMSNorm(residual) * weight."""
        torch.ops.arfusion.fused_add_rms_norm(input, residual, weight, eps, self.name,
                                              gamma_plus_one, norm_rounding, algorithm)

    @_op_errors
    def fused_add_rms_norm_out(self, input, residual, weight, eps: float = 1e-6, *,
                               gamma_plus_one: bool = False, norm_rounding: str = "once",
                               algorithm: str = "auto", post_weight=None):
        """Returns (norm_out, residual_out); residual None = first layer (residual_out = the
        all-reduce). post_weight: a sandwich call (arfusion.torch.ops documents it)."""
        return torch.ops.arfusion.fused_add_rms_norm_out(input, residual, weight, eps, self.name,
                                                         gamma_plus_one, norm_rounding, algorithm,
                                                         post_weight)

    @_op_errors
    def fused_add_rms_norm_quant(self, input, residual, weight, eps: float = 1e-6, *, quant: str,
                                 scale=None, scale_layout: str = "row_major",
                                 scale_format: str = "fp32", with_norm: bool = False,
                                 gamma_plus_one: bool = False, norm_rounding: str = "once",
                                 algorithm: str = "auto", fallback: int = 0,
                                 scale_rule: str = "divide", post_weight=None):
        """Returns (quant_out, scale_out, residual_out, norm_out); see
        arfusion.torch.ops.fused_add_rms_norm_quant (scale_rule "times_reciprocal": the dynamic
        FP8 scales torch itself computes on a GPU; post_weight: a sandwich call)."""
        return torch.ops.arfusion.fused_add_rms_norm_quant(
            input, residual, weight, scale, eps, self.name, quant, scale_layout, scale_format,
            with_norm, gamma_plus_one, norm_rounding, algorithm, fallback, scale_rule, post_weight)

    @_op_errors
    def all_reduce(self, input):
        return torch.ops.arfusion.all_reduce(input, self.name)

    @_op_errors
    def all_reduce_(self, input) -> None:
        torch.ops.arfusion.all_reduce_(input, self.name)
