"""arfusion's vLLM general plugin against the installed vLLM and the installed arfusion package (CPU):
discovery through the package's entry point, vLLM's loader in each process, the off switch, loud
failures, and a 2-rank worker start with vLLM's real distributed initialization over gloo.

What needs a GPU and is not run here: the communicator itself (on the CPU its creation fails on
every rank, which the worker-start test checks), and a served model.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

import vllm_support  # noqa: F401  (skips without vLLM)
from vllm.plugins import DEFAULT_PLUGINS_GROUP, load_plugins_by_group

HERE = os.path.dirname(os.path.abspath(__file__))
ENTRY = "arfusion.integrations.vllm_plugin:register"
LLAMA_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
                "intermediate_size": 2816, "num_attention_heads": 8, "num_key_value_heads": 8,
                "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": 2048,
                "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def run_python(code: str, env_updates: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ARFUSION_VLLM"}
    env.update(env_updates)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=HERE)


def report(proc: subprocess.CompletedProcess) -> dict:
    for line in proc.stdout.splitlines():
        if line.startswith("REPORT "):
            return json.loads(line[len("REPORT "):])
    raise AssertionError(f"no report (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-3000:]}")


# Loads vLLM's general plugins as each vLLM process does, then says what the plugin did.
LOAD = """
import json, sys, time
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging
configure_logging(LoggingConfig())  # vLLM's default log configuration, as each vLLM process applies it
from vllm.plugins import load_general_plugins
import vllm.v1.worker.gpu_worker as gw
t = time.monotonic()
load_general_plugins()
print("REPORT " + json.dumps({
    "seconds": time.monotonic() - t,
    "arfusion_torch_imported": "arfusion.torch" in sys.modules,
    "hooked": bool(getattr(gw.init_worker_distributed_environment, "arfusion_hook", False)),
}))
"""


class Discovery(unittest.TestCase):
    def test_vllms_loader_finds_the_entry_point(self):
        found = load_plugins_by_group(DEFAULT_PLUGINS_GROUP)
        self.assertIn("arfusion", found, sorted(found))
        from arfusion.integrations import vllm_plugin

        self.assertIs(found["arfusion"], vllm_plugin.register)
        from importlib.metadata import entry_points

        (ep,) = [e for e in entry_points(group=DEFAULT_PLUGINS_GROUP) if e.name == "arfusion"]
        self.assertEqual(ep.value, ENTRY)

    def test_vllm_loads_general_plugins_in_each_process(self):
        """The API server (EngineArgs), the engine core and each worker call
        load_general_plugins: the plugin reaches the worker processes."""
        import inspect

        from vllm.engine.arg_utils import EngineArgs
        from vllm.v1.engine.core import EngineCore
        from vllm.v1.worker.worker_base import WorkerWrapperBase

        for where in (EngineArgs.__post_init__, EngineCore.__init__, WorkerWrapperBase.init_worker):
            self.assertIn("load_general_plugins()", inspect.getsource(where), where.__qualname__)


class HookPoint(unittest.TestCase):
    def test_worker_init_device_initializes_distributed_through_the_hooked_name(self):
        """The plugin replaces gpu_worker.init_worker_distributed_environment; vLLM's Worker
        calls it by that module-level name in init_device, before its memory snapshot."""
        import inspect

        from vllm.v1.worker import gpu_worker

        source = inspect.getsource(gpu_worker.Worker.init_device)
        self.assertIn("init_worker_distributed_environment(", source)
        self.assertLess(source.index("init_worker_distributed_environment("),
                        source.index("MemorySnapshot("))

    def test_explicit_worker_example(self):
        """examples/vllm/arfusion_worker.py (the route without the plugin) against this vLLM."""
        import importlib.util

        from vllm.v1.worker.gpu_worker import Worker

        path = os.path.join(HERE, "..", "..", "..", "examples", "vllm", "arfusion_worker.py")
        spec = importlib.util.spec_from_file_location("arfusion_worker", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self.assertTrue(issubclass(module.ArfusionWorker, Worker))
        self.assertIn("init_device", vars(module.ArfusionWorker))


    def test_offline_check_example_arguments(self):
        """examples/vllm/offline_check.py (the GPU check) passes vLLM only arguments this vLLM
        has: EngineArgs fields, and SamplingParams' detokenize."""
        import ast
        import dataclasses

        from vllm import SamplingParams
        from vllm.engine.arg_utils import EngineArgs

        path = os.path.join(HERE, "..", "..", "..", "examples", "vllm", "offline_check.py")
        with open(path) as f:
            tree = ast.parse(f.read())
        (node,) = [n for n in tree.body if isinstance(n, ast.Assign)
                   and getattr(n.targets[0], "id", None) == "ENGINE_ARGS"]
        names = {k.arg for k in node.value.keywords}
        self.assertLessEqual(names, {f.name for f in dataclasses.fields(EngineArgs)})
        self.assertIn("detokenize", inspect_parameters(SamplingParams))


def inspect_parameters(cls) -> set:
    import inspect

    return set(inspect.signature(cls).parameters)


class Switch(unittest.TestCase):
    def test_off_is_a_no_op(self):
        for value in (None, "0", ""):
            env = {} if value is None else {"ARFUSION_VLLM": value}
            r = report(run_python(LOAD, env))
            self.assertFalse(r["hooked"], (value, r))
            self.assertFalse(r["arfusion_torch_imported"], (value, r))
            # loading every general plugin, arfusion's included (it imports the arfusion
            # package, which loads libarfusion.so, and nothing else)
            self.assertLess(r["seconds"], 2.0, (value, r))

    def test_on_hooks_the_worker_start(self):
        proc = run_python(LOAD, {"ARFUSION_VLLM": "1"})
        r = report(proc)
        self.assertTrue(r["hooked"], r)
        self.assertTrue(r["arfusion_torch_imported"], r)
        self.assertIn("ARFUSION_VLLM=1", proc.stdout + proc.stderr)

    def test_on_fails_loudly(self):
        proc = run_python(LOAD, {"ARFUSION_VLLM": "yes"})
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("ARFUSION_VLLM='yes' is neither 1 (on) nor 0 (off)", proc.stderr)
        # arfusion's torch operators missing (as when they were built for another torch):
        # vLLM stops with the ImportError instead of serving unfused
        missing = "import sys; sys.modules['arfusion.torch'] = None\n" + LOAD
        proc = run_python(missing, {"ARFUSION_VLLM": "1"})
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn("ImportError", proc.stderr)
        self.assertNotIn("REPORT", proc.stdout)


class WorkerStart(unittest.TestCase):
    def test_two_ranks(self):
        """Two workers start as vLLM's GPU worker starts them (plugins, then vLLM's distributed
        initialization, which the plugin hooked), tensor parallelism 2 over gloo on 127.0.0.1.
        The hook runs once vLLM's TP group exists and builds the communicator from it, which
        without a GPU fails on both ranks with one error naming both (no hang, not silent).
        Then each rank compiles vLLM's own Llama layers over that group with the pass installed
        from the communicator's facts."""
        with tempfile.TemporaryDirectory() as model, socket.socket() as s:
            with open(os.path.join(model, "config.json"), "w") as f:
                json.dump(LLAMA_CONFIG, f)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            env = {k: v for k, v in os.environ.items()}
            env["ARFUSION_VLLM"] = "1"
            env["PYTHONPATH"] = HERE
            procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "vllm_worker_start.py"),
                                       str(rank), "2", str(port), model, "--compile"],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, cwd=HERE) for rank in (0, 1)]
            outs = [p.communicate(timeout=900) for p in procs]
        reports = []
        for p, (out, err) in zip(procs, outs):
            reports.append(report(subprocess.CompletedProcess(p.args, p.returncode, out, err)))
        for r in reports:
            self.assertTrue(r["hooked"], r)
            self.assertTrue(r["tp_group_made"] and r["tp_world"] == 2, r)
            self.assertEqual(r["result"], "ArfError", r)
            self.assertIn("rank 0: no CUDA device visible; rank 1: no CUDA device visible",
                          r["message"])
            self.assertIn("'vllm:tp:0'", r["message"])
            self.assertNotIn("compile_error", r, r.get("compile_error"))
            c = r["compile"]
            self.assertIn("vllm_ir.fused_add_rms_norm.default", c["entry"])
            self.assertIn("vllm.all_reduce.default", c["entry"])
            self.assertIn("arfusion.fused_add_rms_norm_out.default", c["final"])
            self.assertNotIn("vllm.all_reduce.default", c["final"])
            self.assertEqual(c["replaced"], 1, c["summary"])


if __name__ == "__main__":
    unittest.main()
