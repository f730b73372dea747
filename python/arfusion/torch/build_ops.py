"""Builds the C++ op kernels (arfusion.torch._native):

    python3 -m arfusion.torch.build_ops [BUILD_DIR] [--with-quant]

BUILD_DIR defaults to $ARFUSION_TORCH_OPS_DIR, else arfusion/torch/_native_build; a later
``import arfusion.torch`` finds the library there (or at $ARFUSION_TORCH_OPS_LIBRARY).
--with-quant adds the C++ kernel of fused_add_rms_norm_quant (not yet run on a GPU; without it
that op runs its Python kernel).
"""

import argparse
import sys

from arfusion.torch import _native


def main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m arfusion.torch.build_ops")
    ap.add_argument("build_dir", nargs="?", default=None)
    ap.add_argument("--with-quant", action="store_true",
                    help="also the C++ kernel of fused_add_rms_norm_quant (opt-in)")
    args = ap.parse_args(argv[1:])
    path = _native.build(args.build_dir, verbose=True, quant=args.with_quant)
    print(f"built {path}" + (" (with the quantized op)" if args.with_quant else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
