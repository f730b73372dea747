"""vLLM serving a small Llama with random weights on 2 GPUs, with and without arfusion (needs two
GPUs: vLLM gives each tensor-parallel rank its own):

    python examples/vllm/offline_check.py               # both runs, then the comparison
    python examples/vllm/offline_check.py --run arfusion   # one run (what the script spawns)

No weights or tokenizer are downloaded: the model is a config.json written here and loaded with
load_format="dummy"; prompts are token ids. The arfusion run sets ARFUSION_VLLM=1, so the plugin
(installed with the arfusion package) builds the communicator in each worker and installs the
pass. Checked: the workers' logs say how many all-reduces the pass fused (every layer's two, the
first layer's included), none left unfused, and the greedy tokens of both runs, which may differ
where a rounding tips an argmax (vLLM's native RMSNorm normalizes the unrounded fp32 residual,
arfusion the rounded one), agree for most positions. Exit status 0 when the pass fused and
agreement is at least --min-agreement.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 8,
         "num_hidden_layers": 4, "vocab_size": 32000, "max_position_embeddings": 4096,
         "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


# vLLM's engine arguments of both runs (random weights, token ids in and out, 2-way TP)
ENGINE_ARGS = dict(load_format="dummy", tensor_parallel_size=2, dtype="bfloat16",
                   skip_tokenizer_init=True, max_num_batched_tokens=2048, max_model_len=1024,
                   seed=0, gpu_memory_utilization=0.5)


def run(mode: str, model_dir: str) -> None:
    from vllm import LLM, SamplingParams

    llm = LLM(model=model_dir, **ENGINE_ARGS)
    prompts = [{"prompt_token_ids": [(7 * i + 13 * j) % 32000 for j in range(16 + i)]}
               for i in range(8)]
    outs = llm.generate(prompts, SamplingParams(max_tokens=32, temperature=0.0,
                                                detokenize=False))
    print("TOKENS " + json.dumps([list(o.outputs[0].token_ids) for o in outs]), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", choices=("arfusion", "vllm"))
    ap.add_argument("--model-dir")
    ap.add_argument("--min-agreement", type=float, default=0.9)
    args = ap.parse_args()
    if args.run:
        run(args.run, args.model_dir)
        return 0
    tokens, logs = {}, {}
    with tempfile.TemporaryDirectory() as model_dir:
        with open(os.path.join(model_dir, "config.json"), "w") as f:
            json.dump(LLAMA, f)
        for mode in ("vllm", "arfusion"):
            env = dict(os.environ, ARFUSION_VLLM="1" if mode == "arfusion" else "0",
                       NCCL_NVLS_ENABLE=os.environ.get("NCCL_NVLS_ENABLE", "0"))
            p = subprocess.run([sys.executable, __file__, "--run", mode, "--model-dir", model_dir],
                               env=env, capture_output=True, text=True)
            logs[mode] = p.stdout + p.stderr
            if p.returncode != 0:
                print(logs[mode][-6000:])
                print(f"offline_check: the {mode} run failed (exit {p.returncode})")
                return 1
            line = [x for x in p.stdout.splitlines() if x.startswith("TOKENS ")][-1]
            tokens[mode] = json.loads(line[len("TOKENS "):])
    fused = [int(n) for n in re.findall(r"arfusion: (\d+) all-reduce\(s\) fused", logs["arfusion"])]
    left = re.findall(r"not replaced: .*", logs["arfusion"])
    same = total = 0
    for a, b in zip(tokens["vllm"], tokens["arfusion"]):
        for x, y in zip(a, b):
            same, total = same + (x == y), total + 1
    agreement = same / max(total, 1)
    print(f"offline_check: pass logs {len(fused)} graph(s), {sum(fused)} all-reduce(s) fused, "
          f"{len(left)} left unfused; greedy tokens agree at {same}/{total} ({agreement:.1%})")
    for line in left[:10]:
        print("  " + line)
    if "turning vLLM's all-reduce + RMSNorm fusion off" not in logs["arfusion"] and \
            "fuse_allreduce_rms" not in logs["arfusion"]:
        print("  note: vLLM's own fusion was already off in this configuration")
    ok = sum(fused) > 0 and not left and agreement >= args.min_agreement
    print("offline_check: " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
