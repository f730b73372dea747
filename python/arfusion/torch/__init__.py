"""arfusion for PyTorch. Requires torch >= 2.6 (torch.library.register_fake / opcheck, a cache-safe
CustomGraphPass); an older torch is an ImportError saying so.

    import arfusion.torch as aft
    comm = aft.Communicator.from_group(tp_group, max_tokens=2048, max_hidden=8192,
                                       dtype=torch.bfloat16)          # collective over the group
    model = torch.compile(model, options=aft.compile_options(comm))  # fuses AR + add + RMSNorm

Contents:
  * ``Communicator`` (from_group / from_nccl): one rank of an arfusion communicator over the ipc
    transport, named in a process-wide registry so that ops can refer to it by a string;
  * operators ``torch.ops.arfusion.*`` (registered on import, see ``arfusion.torch.ops``):
    fused_add_rms_norm (in place), fused_add_rms_norm_out, fused_add_rms_norm_quant, all_reduce,
    all_reduce_; thin wrappers on the Communicator;
  * ``AllReduceFusionPass`` (``arfusion.torch.compile``): an Inductor post-grad pass replacing
    all-reduce -> residual add -> RMSNorm (-> FP8 quantization) with the fused operators.
"""

from __future__ import annotations

try:
    import torch as _torch
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("arfusion.torch requires PyTorch >= 2.6 (torch is not installed)") from e


def _torch_version_tuple(version: str) -> tuple[int, int]:
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return (0, 0)


TORCH_MIN_VERSION = (2, 6)
if _torch_version_tuple(_torch.__version__) < TORCH_MIN_VERSION:
    raise ImportError(
        f"arfusion.torch requires PyTorch >= 2.6; this is torch {_torch.__version__} "
        f"(from {getattr(_torch, '__file__', '?')})")

from ._comm import Communicator, get_communicator, registered_communicators  # noqa: E402,F401
from . import ops  # noqa: E402,F401  (registers torch.ops.arfusion.*)
from .compile import (AllReduceFusionPass, CommunicatorFacts, FusionStats,  # noqa: E402,F401
                      compile_options)

__all__ = ["Communicator", "get_communicator", "registered_communicators", "ops",
           "AllReduceFusionPass", "CommunicatorFacts", "FusionStats", "compile_options",
           "TORCH_MIN_VERSION"]
