"""arfusion: fused tensor-parallel all-reduce + residual add + RMSNorm (+ FP8/FP4 quantization).

Python binding over the C API (include/arfusion/arfusion.h) with ctypes. Importing this package
never imports torch; it loads libarfusion.so and checks the binding's struct mirrors and enum
values against it (an ImportError names any difference). The library is found at
$ARFUSION_LIBRARY, else next to this package (where `pip install` puts the one it builds), else
at the source tree's build/libarfusion.so (arfusion._lib.find_library).

PyTorch (>= 2.10): ``import arfusion.torch`` for communicators built from torch.distributed groups,
the ``torch.ops.arfusion.*`` operators and the torch.compile pass.

This package is the torch-free layer: ids, plans, scale-buffer sizes and the quantized outputs'
layout, the communicator handle with raw device pointers (``Comm``) and the error type
``ArfError``.
"""

from ._core import (
    BufferLayout,
    Comm,
    Plan,
    QuantOutputs,
    abi_names,
    abi_query,
    algorithm_from_name,
    algorithm_name,
    comm_config,
    fused_args,
    library_path,
    new_unique_id_string,
    pattern_name,
    plan_facts,
    plan_from_facts,
    quant_output_layout,
    scale_buffer_bytes,
    status_string,
    unique_id,
    unique_id_from_string,
    unique_id_to_string,
    workspace_bytes,
)
from ._lib import (
    ARF_API_VERSION,
    ARF_MAX_RANKS,
    UINT64_MAX,
    Algorithm,
    ArfError,
    DataType,
    ElementType,
    FallbackLevel,
    Fp8ScaleRule,
    NormRounding,
    Pattern,
    ScaleFormat,
    ScaleLayout,
    Status,
    Transport,
    arfCommConfig_t,
    arfFusedArgs_t,
    arfPlan_t,
    arfPlanFacts_t,
    arfQuantBuffer_t,
    arfQuantOutputs_t,
    arfUniqueId,
    status_name,
)

__version__ = "0.1.0"
__all__ = [
    "ARF_API_VERSION", "ARF_MAX_RANKS", "UINT64_MAX", "Algorithm", "ArfError", "BufferLayout",
    "Comm", "DataType", "ElementType", "FallbackLevel", "Fp8ScaleRule", "NormRounding", "Pattern",
    "Plan", "QuantOutputs", "ScaleFormat", "ScaleLayout", "Status", "Transport", "abi_names",
    "abi_query", "algorithm_from_name", "algorithm_name", "arfCommConfig_t", "arfFusedArgs_t",
    "arfPlan_t", "arfPlanFacts_t", "arfQuantBuffer_t", "arfQuantOutputs_t", "arfUniqueId",
    "comm_config", "fused_args", "library_path", "new_unique_id_string", "pattern_name",
    "plan_facts", "plan_from_facts", "quant_output_layout", "scale_buffer_bytes", "status_name",
    "status_string", "unique_id", "unique_id_from_string", "unique_id_to_string",
    "workspace_bytes",
]
