"""arfusion for PyTorch. Requires torch >= 2.10 (the stable C++ ABI the op library is built on);
an older torch, or a package installed without its op library, is an ImportError saying why.

    import arfusion.torch as aft
    comm = aft.Communicator.from_group(tp_group, max_tokens=2048, max_hidden=8192,
                                       dtype=torch.bfloat16)          # collective over the group
    model = torch.compile(model, options=aft.compile_options(comm))  # fuses AR + add + RMSNorm

Contents:
  * ``Communicator`` (from_group / from_nccl): one rank of an arfusion communicator over the ipc
    transport, named in a process-wide registry so that ops can refer to it by a string;
  * operators ``torch.ops.arfusion.*`` (the op library, loaded on import; see
    ``arfusion.torch.ops``): fused_add_rms_norm (in place), fused_add_rms_norm_out,
    fused_add_rms_norm_quant, all_reduce, all_reduce_; the Communicator wraps them;
  * ``AllReduceFusionPass`` (``arfusion.torch.compile``): an Inductor post-grad pass replacing
    all-reduce -> residual add -> RMSNorm (-> FP8 quantization) with the fused operators.
"""

try:
    import torch as _torch
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("arfusion.torch requires PyTorch >= 2.10 (torch is not installed); install "
                      "it, then reinstall arfusion so that its op library is built") from e

TORCH_MIN_VERSION = (2, 10)


def _torch_version_tuple(version: str) -> tuple:
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return (0, 0)


if _torch_version_tuple(_torch.__version__) < TORCH_MIN_VERSION:
    raise ImportError(
        f"arfusion.torch requires PyTorch >= 2.10 (the stable C++ ABI); this is torch "
        f"{_torch.__version__} (from {getattr(_torch, '__file__', '?')})")

from . import ops  # noqa: E402  (loads the op library: torch.ops.arfusion.*)
from ._comm import Communicator, get_communicator, registered_communicators  # noqa: E402
from .compile import (AllReduceFusionPass, CommunicatorFacts, FusionStats,  # noqa: E402
                      compile_options)

__all__ = ["Communicator", "get_communicator", "registered_communicators", "ops",
           "AllReduceFusionPass", "CommunicatorFacts", "FusionStats", "compile_options",
           "TORCH_MIN_VERSION"]
