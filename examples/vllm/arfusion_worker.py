"""vLLM's GPU worker with arfusion, for an engine that starts its workers itself rather than
through the plugin (arfusion.integrations.vllm_plugin):

    PYTHONPATH=examples/vllm vllm serve MODEL --tensor-parallel-size 2 \
        --worker-cls arfusion_worker.ArfusionWorker

Everything arfusion needs happens at worker start, after vLLM's distributed initialization (the
TP group exists, this rank's CUDA device is current) and before the model is loaded and
compiled: the communicator over vLLM's TP group, and the pass installed in vLLM's pass manager
after vLLM's IR lowering, with vLLM's own all-reduce fusion turned off. setup_worker is
collective over the TP group: every worker calls it, and a failure raises on every rank.
"""

from vllm.v1.worker.gpu_worker import Worker

from arfusion.integrations.vllm import setup_worker


class ArfusionWorker(Worker):
    def init_device(self):
        super().init_device()
        # None when tensor parallelism is 1 (nothing to all-reduce).
        self.arfusion_comm = setup_worker(self.vllm_config)
