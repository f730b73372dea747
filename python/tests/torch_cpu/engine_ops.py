"""Stand-ins of the inference engines' collective ops, registered on the CPU under the engines' own
namespaces and schemas, so that the compile pass meets the graph nodes a vLLM or SGLang model
produces without either engine installed. The schemas are those the engines' own registration
derives from their Python signatures (torch.library.infer_schema over the functions of
vllm/distributed/parallel_state.py, vllm/model_executor/layers/fused_moe/runner/moe_runner.py,
vllm/distributed/device_communicators/pynccl.py in vLLM 0.34.0, and
sglang/srt/distributed/parallel_state.py in SGLang 0.5.23; older vLLM releases registered
inplace_all_reduce / outplace_all_reduce with the two-argument signatures below). The MoE ops' layer
name is a plain str here (vLLM may type it as an opaque object). vLLM's compiled FP8 quantization
op is here too, as an opaque reader of a norm.

Their CPU kernels do what the fake process group does for torch's own all-reduce: the sum over
ranks of one rank's data is that data (a copy, or nothing in place), so a model compiled with the
pass computes the same values as eagerly. The MoE stand-ins return their input (the routed experts'
arithmetic is not the point: the all-reduce that vLLM's FusedMoE may run inside is).
"""

from __future__ import annotations

import torch

# (namespace, schema) of every stand-in; the kernel follows from the op's kind below
SCHEMAS = {
    "vllm": [
        "all_reduce(Tensor tensor, str group_name) -> Tensor",
        "all_reduce_symmetric_with_copy(Tensor input_tensor) -> Tensor",
        "inplace_all_reduce(Tensor(a0!) tensor, str group_name) -> ()",
        "outplace_all_reduce(Tensor tensor, str group_name) -> Tensor",
        "moe_forward(Tensor(a0!) hidden_states, Tensor router_logits, Tensor? shared_experts_input, "
        "Tensor? input_ids, str layer_name, int hidden_dim_unpadded) -> Tensor",
        "moe_forward_shared(Tensor hidden_states, Tensor router_logits, Tensor? shared_experts_input, "
        "Tensor? input_ids, str layer_name, int hidden_dim_unpadded) -> (Tensor, Tensor)",
        "reduce_scatter(Tensor tensor, int dim, int world_size, str group_name) -> Tensor",
    ],
    "_C": [  # vLLM's compiled quantization ops (vllm/_C_stable_libtorch.abi3.so's schema strings)
        "dynamic_per_token_scaled_fp8_quant(Tensor! result, Tensor input, Tensor! scale, "
        "Tensor? scale_ub) -> ()",
    ],
    "sglang": [
        "inplace_all_reduce(Tensor(a0!) tensor, str group_name) -> ()",
        "outplace_all_reduce(Tensor tensor, str group_name, str outplace_all_reduce_method) -> Tensor",
        "flashinfer_allreduce(Tensor tensor, str group_name) -> Tensor",
    ],
}

_libs = []


def _copy(tensor, *args):
    return tensor.clone()


def _in_place(tensor, *args):
    return None


def _moe(hidden_states, *args):
    return hidden_states.clone()


def _moe_shared(hidden_states, *args):
    return hidden_states.clone(), hidden_states.clone()


def _quant_in_place(result, input, scale, scale_ub):
    """Fills the outputs with something of the right type (the op's arithmetic is not tested)."""
    result.copy_(input.float().clamp(-448.0, 448.0).to(result.dtype))
    scale.fill_(1.0)


def _reduce_scatter(tensor, dim, world_size, group_name):
    return tensor.chunk(world_size, dim)[0].clone()


_KERNELS = {"inplace_all_reduce": _in_place, "moe_forward": _moe,
            "dynamic_per_token_scaled_fp8_quant": _quant_in_place,
            "moe_forward_shared": _moe_shared, "reduce_scatter": _reduce_scatter}


def _fake(kernel):
    def fake(*args):
        if kernel in (_in_place, _quant_in_place):
            return None
        if kernel is _reduce_scatter:
            t, dim, world = args[0], args[1], args[2]
            shape = list(t.shape)
            shape[dim] //= world
            return t.new_empty(shape)
        if kernel is _moe_shared:
            return torch.empty_like(args[0]), torch.empty_like(args[0])
        return torch.empty_like(args[0])
    return fake


def register(dispatch_keys=("CPU",)) -> None:
    """Defines the stand-ins once per process (later calls do nothing), their kernels for the given
    dispatch keys (the GPU tests add "CUDA")."""
    if _libs:
        return
    for ns, schemas in SCHEMAS.items():
        lib = torch.library.Library(ns, "FRAGMENT")
        for schema in schemas:
            name = schema.split("(")[0]
            lib.define(schema)
            kernel = _KERNELS.get(name, _copy)
            for key in dispatch_keys:
                lib.impl(name, kernel, key)
            torch.library.register_fake(f"{ns}::{name}", _fake(kernel), lib=lib)
        _libs.append(lib)
