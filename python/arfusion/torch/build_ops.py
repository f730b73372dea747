"""Builds the C++ op kernels (arfusion.torch._native):

    python3 -m arfusion.torch.build_ops [BUILD_DIR] [--without-quant]

BUILD_DIR defaults to $ARFUSION_TORCH_OPS_DIR, else arfusion/torch/_native_build; a later
``import arfusion.torch`` finds the library there (or at $ARFUSION_TORCH_OPS_LIBRARY).
The library holds the C++ kernels of every op, fused_add_rms_norm_quant included; --without-quant
leaves that one out (the op then runs its Python kernel).
"""

import argparse
import sys

from arfusion.torch import _native


def main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m arfusion.torch.build_ops")
    ap.add_argument("build_dir", nargs="?", default=None)
    ap.add_argument("--without-quant", action="store_true",
                    help="leave out the C++ kernel of fused_add_rms_norm_quant (its Python kernel runs)")
    args = ap.parse_args(argv[1:])
    path = _native.build(args.build_dir, verbose=True, quant=not args.without_quant)
    print(f"built {path}" + (" (without the quantized op)" if args.without_quant else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
