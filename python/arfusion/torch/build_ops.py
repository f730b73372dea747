"""Builds the C++ op kernels (arfusion.torch._native):

    python3 -m arfusion.torch.build_ops [BUILD_DIR]

BUILD_DIR defaults to $ARFUSION_TORCH_OPS_DIR, else arfusion/torch/_native_build; a later
``import arfusion.torch`` finds the library there (or at $ARFUSION_TORCH_OPS_LIBRARY).
"""

import sys

from arfusion.torch import _native


def main(argv) -> int:
    path = _native.build(argv[1] if len(argv) > 1 else None, verbose=True)
    print(f"built {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
