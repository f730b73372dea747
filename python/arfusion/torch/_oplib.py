"""The op library: libarfusion_torch_ops.so beside this file (csrc/ops_stable.cc: the schemas and
CUDA kernels of torch.ops.arfusion.*, on torch's stable ABI), built by `pip install` against the
installing interpreter's torch. Loaded once, at import; the communicator names the kernels resolve
are registered here (Communicator does it).

A package installed without the op library (no usable torch at install time, or a source tree on
PYTHONPATH) raises ImportError naming the reason, which the build recorded in ops_build.json.
"""

from __future__ import annotations

import ctypes
import json
import pathlib

import torch

from arfusion import _core, _lib

_HERE = pathlib.Path(__file__).resolve().parent
LIBRARY = _HERE / "libarfusion_torch_ops.so"
BUILD_INFO = _HERE / "ops_build.json"
REINSTALL = "pip install --no-build-isolation <arfusion source>/python"


def _missing_reason() -> str:
    try:
        info = json.loads(BUILD_INFO.read_text())
    except FileNotFoundError:
        return (f"this copy of arfusion ({_HERE.parent}) was not installed by its build (a source "
                f"tree on PYTHONPATH has no op library): {REINSTALL}")
    except (OSError, ValueError) as e:
        return f"{BUILD_INFO} is unreadable ({e}): {REINSTALL}"
    why = info.get("reason") or "no reason recorded"
    return (f"it was not built when arfusion was installed: {why}. Make torch >= 2.10 (a CUDA "
            f"build) importable by this interpreter and reinstall: {REINSTALL}")


def check_same_library(cdll: ctypes.CDLL, arf: ctypes.CDLL) -> None:
    """The op library must call the very libarfusion.so this package loaded (it is handed that
    library's communicator handles): ImportError when its arfAbiQuery is another one's."""
    theirs = cdll.arfusion_torch_ops_arf_abi_query()
    ours = ctypes.cast(arf.arfAbiQuery, ctypes.c_void_p).value
    if theirs != ours:
        raise ImportError(
            f"arfusion.torch: {LIBRARY} is bound to another libarfusion.so than the one arfusion "
            f"loaded ({_core.library_path}): two copies of the library cannot share communicators. "
            "Load the library next to the package (unset ARFUSION_LIBRARY) or reinstall")


def _load() -> ctypes.CDLL:
    if not LIBRARY.is_file():
        raise ImportError(f"arfusion.torch: the op library {LIBRARY.name} is missing: "
                          f"{_missing_reason()}")
    arf = _lib.library().lib  # first: the op library binds to this copy (same soname)
    try:
        torch.ops.load_library(str(LIBRARY))  # defines torch.ops.arfusion.* and their CUDA kernels
        cdll = ctypes.CDLL(str(LIBRARY))
        cdll.arfusion_torch_ops_api_version.restype = ctypes.c_uint
        cdll.arfusion_torch_ops_arf_abi_query.restype = ctypes.c_void_p
        cdll.arfusion_torch_register.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
        cdll.arfusion_torch_register.restype = ctypes.c_int
        cdll.arfusion_torch_unregister.argtypes = [ctypes.c_char_p]
        cdll.arfusion_torch_unregister.restype = None
    except (OSError, RuntimeError, AttributeError) as e:
        raise ImportError(f"arfusion.torch: cannot load {LIBRARY}: {e}. Reinstall: {REINSTALL}") from e
    built = int(cdll.arfusion_torch_ops_api_version())
    if built != _lib.ARF_API_VERSION:
        raise ImportError(f"arfusion.torch: {LIBRARY} was built against API version {built}, this "
                          f"package is {_lib.ARF_API_VERSION}: reinstall ({REINSTALL})")
    check_same_library(cdll, arf)
    return cdll


_CDLL = _load()


def register_comm(name: str, handle: int, device_index: int) -> None:
    """Names a communicator for the kernels (they receive names: compiled graphs hold no
    pointers)."""
    if _CDLL.arfusion_torch_register(name.encode(), handle, device_index) != 0:
        raise RuntimeError(f"arfusion: a communicator named {name!r} already exists")


def unregister_comm(name: str) -> None:
    _CDLL.arfusion_torch_unregister(name.encode())
