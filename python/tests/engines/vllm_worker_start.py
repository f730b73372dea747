"""One vLLM worker's start, as vLLM's GPU worker runs it, on the CPU (used by test_vllm_plugin):

    python vllm_worker_start.py RANK WORLD PORT MODEL_DIR

vLLM's plugins load (as WorkerWrapperBase.init_worker loads them), then the function
Worker.init_device calls to initialize vLLM's distributed state
(vllm.v1.worker.gpu_worker.init_worker_distributed_environment) runs with gloo over
127.0.0.1:PORT for a WORLD-rank tensor-parallel group. With ARFUSION_VLLM=1 the plugin has hooked
it: arfusion's setup_worker runs right after it and, with no GPU here, must fail on every rank
with the communicator's error. Prints one JSON line: what happened.
"""

import json
import sys
import time

rank, world, port, model_dir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
report = {"rank": rank}
from vllm.config import (CompilationConfig, CompilationMode, DeviceConfig, ModelConfig,  # noqa: E402
                         ParallelConfig, VllmConfig, set_current_vllm_config)
from vllm.plugins import load_general_plugins  # noqa: E402

load_general_plugins()
from vllm.v1.worker import gpu_worker  # noqa: E402

report["hooked"] = bool(getattr(gpu_worker.init_worker_distributed_environment, "arfusion_hook",
                                False))
cfg = VllmConfig(model_config=ModelConfig(model=model_dir, dtype="bfloat16",
                                          skip_tokenizer_init=True),
                 parallel_config=ParallelConfig(tensor_parallel_size=world),
                 device_config=DeviceConfig(device="cpu"),
                 compilation_config=CompilationConfig(mode=CompilationMode.VLLM_COMPILE))
start = time.monotonic()
try:
    with set_current_vllm_config(cfg):  # as vLLM's worker holds it during init_device
        gpu_worker.init_worker_distributed_environment(cfg, rank, f"tcp://127.0.0.1:{port}", rank,
                                                       "gloo")
    report["result"] = "ok"
except Exception as e:  # noqa: BLE001 - the test reads which error
    report["result"] = type(e).__name__
    report["message"] = str(e)
report["seconds"] = round(time.monotonic() - start, 1)
from vllm.distributed import parallel_state  # noqa: E402

report["tp_group_made"] = parallel_state._TP is not None
if parallel_state._TP is not None:
    report["tp_world"] = parallel_state._TP.world_size
report["fuse_allreduce_rms"] = cfg.compilation_config.pass_config.fuse_allreduce_rms


def compile_llama_mlp_block():
    """vLLM's own Llama layers over the real TP group, compiled through vLLM's pass manager with
    the pass installed from the communicator's facts (the communicator itself needs a GPU):
    the post-attention RMSNorm, LlamaMLP (its down projection is a RowParallelLinear, whose
    output is all-reduced over the TP group) and the next layer's input RMSNorm. Attention is
    left out: its vLLM layer needs an attention backend and a KV cache, which need a GPU."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.layernorm import RMSNorm
    from vllm.model_executor.models.llama import LlamaMLP

    import arfusion.torch as aft
    import vllm_support as vs
    from arfusion.integrations import vllm as av

    tp = parallel_state.get_tp_group()
    # The CUDA platform routes a group's all-reduce through torch.ops.vllm.all_reduce
    # (use_custom_op_collectives); this CPU run has no platform, so it is set as CUDA sets it.
    tp.use_custom_op_call = True
    hidden, inter = 1024, 2816
    torch.set_default_dtype(torch.bfloat16)
    with set_current_vllm_config(cfg):
        post_norm = RMSNorm(hidden, eps=1e-6)
        mlp = LlamaMLP(hidden, inter, "silu", quant_config=None, prefix="model.layers.0.mlp")
        next_norm = RMSNorm(hidden, eps=1e-6)
    for p in mlp.parameters():
        p.data.normal_(0, 0.02)

    def block(h, residual):
        h, residual = post_norm(h, residual)
        return next_norm(mlp(h), residual)

    cfg.kernel_config.ir_op_priority.set_default()
    facts = aft.CommunicatorFacts("vllm:" + tp.unique_name, world_size=tp.world_size,
                                  max_tokens=2048, max_hidden=hidden, ranks=list(tp.ranks))
    p = av.install_pass(cfg, facts, group_name=tp.unique_name)
    c = vs.Compiled(cfg, block, (vs.randn((16, hidden), 10 + rank), vs.randn((16, hidden), 20 + rank)))
    return {"entry": c.targets_at_entry, "final": c.targets, "summary": p.arf_pass.stats.summary(),
            "replaced": p.arf_pass.stats.replaced, "group": tp.unique_name}


if len(sys.argv) > 5 and sys.argv[5] == "--compile" and report.get("tp_group_made"):
    try:
        report["compile"] = compile_llama_mlp_block()
    except Exception as e:  # noqa: BLE001 - reported to the test
        import traceback

        report["compile_error"] = traceback.format_exc()[-3000:]
print("REPORT " + json.dumps(report), flush=True)
