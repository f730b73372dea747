"""arfusion inside inference engines.

  * ``arfusion.integrations.vllm``: the compile pass in vLLM's post-grad pass manager, after vLLM's
    IR ops are lowered, and the communicator built from vLLM's tensor-parallel group at worker
    start (``setup_worker``, ``install_pass``);
  * ``arfusion.integrations.vllm_plugin``: the same as a vLLM general plugin (entry point
    ``vllm.general_plugins``), switched on by ``ARFUSION_VLLM=1``;
  * ``arfusion.integrations.sglang``: the call SGLang's RMSNorm makes in place of FlashInfer's
    fused all-reduce + residual add + RMSNorm, with SGLang's conventions.

None of these modules imports an engine, or torch, until one of its functions is called.
"""
