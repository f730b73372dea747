#!/usr/bin/env python3
"""GPU tests of arfusion.torch: N = 2, 4, 8 rank processes (one GPU is enough: the ranks share it,
time-sliced, over the ipc transport; with several GPUs rank r uses GPU r % count).

    python3 python/tests/gpu/run_gpu_tests.py [--worlds 2,4,8] [--scenarios core,graphs] [--json FILE]

Needs torch >= 2.10 with CUDA and the arfusion package installed (python/tests/run_gpu_tests.sh
installs it and sets PYTHONPATH; a copy from the source tree is refused: it has no op library).
Exit 0 all passed, 1 a failure, 77 skipped ("SKIPPED: ..." says why). Scenarios per
world size are scenarios.SUITES; every check's verdict is printed, then "N passed, N failed".
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
SOURCE_PACKAGE = os.path.abspath(os.path.join(HERE, "..", "..", "arfusion"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="2,4,8")
    ap.add_argument("--scenarios", default="", help="comma-separated scenario names (all worlds)")
    ap.add_argument("--json", default=None, help="write every verdict here")
    ap.add_argument("--deadline", type=float, default=600.0, help="seconds per world size")
    ap.add_argument("--no-forms", action="store_true", help="skip pass_forms.py (one process)")
    args = ap.parse_args()

    try:
        import torch
    except ImportError:
        print("SKIPPED: torch is not installed (arfusion.torch needs torch >= 2.10)", flush=True)
        return 77
    major_minor = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if major_minor < (2, 10):
        print(f"SKIPPED: torch {torch.__version__} < 2.10", flush=True)
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device visible", flush=True)
        return 77
    try:
        import arfusion  # the library must load before spawning ranks
    except ImportError as e:
        print(f"FAILED: import arfusion: {e}", flush=True)
        return 1
    if os.path.dirname(os.path.abspath(arfusion.__file__)) == SOURCE_PACKAGE:
        print(f"FAILED: arfusion is imported from the source tree ({SOURCE_PACKAGE}); the tests run "
              "against the installed package (python/tests/run_gpu_tests.sh installs it)", flush=True)
        return 1

    import harness

    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}; library "
          f"{arfusion.library_path}", flush=True)
    try:
        import arfusion.torch as aft  # the ranks import it too
    except ImportError as e:
        print(f"FAILED: import arfusion.torch: {e}", flush=True)
        return 1

    print(f"package {os.path.dirname(arfusion.__file__)}; op library {aft.ops.library_path()}",
          flush=True)
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}
    if args.scenarios:
        env["ARF_GPU_SCENARIOS"] = args.scenarios
    if os.environ.get("ARFUSION_LIBRARY"):
        env["ARFUSION_LIBRARY"] = os.environ["ARFUSION_LIBRARY"]
    passed = failed = skipped = 0
    verdicts = []
    if not args.no_forms and not args.scenarios:
        # The compile pass on every source form, one process with a fake process group.
        import subprocess
        import tempfile

        print("=== pass forms (one process) ===", flush=True)
        out = tempfile.mktemp(suffix=".json")
        proc = subprocess.run([sys.executable, os.path.join(HERE, "pass_forms.py"), "--json", out],
                              timeout=args.deadline)
        try:
            with open(out) as f:
                forms = json.load(f)
        except (OSError, ValueError):
            forms = []
        for r in forms:
            passed += r["ok"]
            failed += not r["ok"]
            verdicts.append({"world": 1, "name": "pass forms: " + r["name"],
                             "verdict": "PASS" if r["ok"] else "FAIL", "details": [r["detail"]]})
        if proc.returncode not in (0, 1) or not forms:
            failed += 1
            print(f"FAIL  pass_forms.py exited {proc.returncode} with {len(forms)} results", flush=True)
    for world in [int(w) for w in args.worlds.split(",") if w]:
        t0 = time.time()
        print(f"=== world {world} ===", flush=True)
        results, problems = harness.run_scenario("scenarios", "suite", world, args.deadline, env)
        for name, r in results:
            if r["skipped"] is not None and r["ok"]:
                skipped += 1
                verdict = "SKIP"
                print(f"SKIP  [{world}] {name}: {r['skipped']}", flush=True)
            elif r["ok"]:
                passed += 1
                verdict = "PASS"
                print(f"PASS  [{world}] {name} ({r['seconds']:.1f} s)", flush=True)
            else:
                failed += 1
                verdict = "FAIL"
                print(f"FAIL  [{world}] {name}", flush=True)
                for d in r["details"]:
                    print("      " + d.replace("\n", "\n      "), flush=True)
            verdicts.append({"world": world, "name": name, "verdict": verdict,
                             "details": r["details"], "skipped": r["skipped"],
                             "seconds": r["seconds"]})
        for p in problems:
            failed += 1
            print(f"FAIL  [{world}] {p}", flush=True)
            verdicts.append({"world": world, "name": "<harness>", "verdict": "FAIL", "details": [p]})
        print(f"--- world {world}: {time.time() - t0:.0f} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "verdicts": verdicts}, f, indent=1)
    print(f"{passed} passed, {failed} failed, {skipped} skipped", flush=True)
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
