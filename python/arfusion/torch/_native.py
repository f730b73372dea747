"""The C++ implementations of the hot ops (csrc/ops_stable.cc, torch's stable ABI, torch >= 2.10):
build, find, load, and the communicator names they resolve.

An eager call of a Python-implemented op pays the dispatcher's trip into Python and the ctypes
call (measured: ~13 us over the library's own host time); the C++ kernels of the same schemas pay
a C++ dispatch. Under CUDA graphs neither costs anything per replay.

Which implementation runs is chosen at import by ``ARFUSION_TORCH_OPS``:
  auto (default)  the C++ library when it is built (see ``build``) and this torch has the stable
                  ABI's strings (>= 2.10); else the Python implementations; ``backend()`` says
                  which and why
  cpp             the C++ library or an ImportError saying why not
  python          the Python implementations only
The library is ``$ARFUSION_TORCH_OPS_LIBRARY`` when set, else ``arfusion_torch_ops.so`` in
``default_build_dir()``. Build it once per machine and torch install (it needs a C++ compiler, the CUDA
toolkit's headers and the arfusion header; it links the libarfusion.so this package loads):

    python3 -m arfusion.torch.build_ops          # or arfusion.torch._native.build()
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import pathlib
import warnings

import torch

from arfusion import _lib

LIBRARY_NAME = "arfusion_torch_ops"
MIN_TORCH = (2, 10)  # string arguments in the stable ABI
_HERE = pathlib.Path(__file__).resolve().parent
SOURCE = _HERE / "csrc" / "ops_stable.cc"

_state: dict = {"backend": "python", "library": None, "reason": "not loaded", "ops": frozenset(),
                "cdll": None}


def default_build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("ARFUSION_TORCH_OPS_DIR") or (_HERE / "_native_build"))


def library_path() -> pathlib.Path:
    env = os.environ.get("ARFUSION_TORCH_OPS_LIBRARY")
    return pathlib.Path(env) if env else default_build_dir() / f"{LIBRARY_NAME}.so"


def _include_dir() -> pathlib.Path:
    env = os.environ.get("ARFUSION_INCLUDE")
    if env:
        return pathlib.Path(env)
    for cand in (_HERE.parent / "include", _HERE.parents[2] / "include"):  # installed, source tree
        if (cand / "arfusion" / "arfusion.h").exists():
            return cand
    raise FileNotFoundError("arfusion: arfusion/arfusion.h not found next to the package or in the "
                            "source tree; set ARFUSION_INCLUDE to the directory holding arfusion/")


def _torch_version() -> tuple[int, int]:
    parts = torch.__version__.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return (0, 0)


def source_stamp(schemas: str) -> str:
    """What a build of the C++ kernels depends on: their source, the arfusion header and the
    schemas they implement (a library built from other ones reads another stack layout)."""
    h = hashlib.sha256()
    h.update(SOURCE.read_bytes())
    h.update((_include_dir() / "arfusion" / "arfusion.h").read_bytes())
    h.update(schemas.encode())
    return h.hexdigest()


def _stamp_path(library: pathlib.Path) -> pathlib.Path:
    return library.with_name(library.name + ".stamp")


def build(build_dir: str | os.PathLike | None = None, verbose: bool = False,
          quant: bool = True) -> pathlib.Path:
    """Compiles csrc/ops_stable.cc against this torch's headers and the libarfusion.so this
    package loads ($CXX, default g++); returns the library's path. Nothing is loaded into this
    process (a process that has imported arfusion.torch keeps the implementations it chose).
    quant: the C++ kernel of fused_add_rms_norm_quant too (-DARF_TORCH_OPS_QUANT; False leaves
    that op on its Python kernel)."""
    import shutil
    import subprocess

    from torch.utils import cpp_extension

    if _torch_version() < MIN_TORCH:
        raise RuntimeError(f"arfusion: the C++ ops need torch >= 2.10 (this is {torch.__version__})")
    out_dir = pathlib.Path(build_dir) if build_dir is not None else default_build_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{LIBRARY_NAME}.so"
    arf = pathlib.Path(_lib.library().path).resolve()
    torch_dir = pathlib.Path(torch.__file__).resolve().parent
    cuda_home = cpp_extension.CUDA_HOME
    if not cuda_home:
        raise RuntimeError("arfusion: the C++ ops need the CUDA toolkit's headers (no CUDA_HOME / nvcc)")
    cxx = os.environ.get("CXX") or shutil.which("g++") or "c++"
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    cmd = [cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden",
           f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *(["-DARF_TORCH_OPS_QUANT=1"] if quant else []),
           f"-I{_include_dir()}", f"-I{torch_dir / 'include'}", f"-I{pathlib.Path(cuda_home) / 'include'}",
           str(SOURCE), "-o", str(out) + ".tmp",
           f"-L{torch_dir / 'lib'}", "-ltorch_cpu", "-ltorch_cuda", "-lc10",
           f"-Wl,-rpath,{torch_dir / 'lib'}",
           f"-L{arf.parent}", f"-l:{arf.name}", f"-Wl,-rpath,{arf.parent}"]
    if verbose:
        print(" ".join(cmd))
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"arfusion: building the C++ ops failed ({cxx}, exit {done.returncode}):\n"
                           f"{done.stderr[-6000:]}")
    from .ops import SCHEMAS

    _stamp_path(out).write_text(source_stamp(repr(SCHEMAS)) + "\n")
    os.replace(str(out) + ".tmp", out)  # a process loading the old library never sees half a file
    return out


def load(schemas: str = "") -> None:
    """Loads the C++ ops per ARFUSION_TORCH_OPS (module docstring); records the outcome. schemas:
    repr of ops.SCHEMAS, which with the sources must match the library's build stamp (a library
    left from other sources, e.g. before a pull, is not used)."""
    mode = os.environ.get("ARFUSION_TORCH_OPS", "auto").strip().lower() or "auto"
    if mode not in ("auto", "cpp", "python"):
        raise ImportError(f"arfusion: ARFUSION_TORCH_OPS={mode!r}: auto, cpp or python")
    if mode == "python":
        _state.update(backend="python", reason="ARFUSION_TORCH_OPS=python")
        return
    path = library_path()
    reason = None
    if _torch_version() < MIN_TORCH:
        reason = f"torch {torch.__version__} < 2.10 (the stable ABI has no strings before)"
    elif not path.exists():
        reason = f"{path} is not built (python3 -m arfusion.torch.build_ops)"
    else:
        stamp = _stamp_path(path)
        try:
            built_from = stamp.read_text().strip() if stamp.exists() else ""
            if built_from != source_stamp(schemas):
                reason = (f"{path} was built from other sources or schemas than this package's "
                          f"(stamp {stamp}): rebuild it (python3 -m arfusion.torch.build_ops)")
        except OSError as e:
            reason = f"cannot check {path}'s build stamp: {e}"
    if reason is None:
        try:
            torch.ops.load_library(str(path))
            cdll = ctypes.CDLL(str(path))
            cdll.arfusion_torch_native_api_version.restype = ctypes.c_uint
            cdll.arfusion_torch_native_ops.restype = ctypes.c_char_p
            cdll.arfusion_torch_register.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
            cdll.arfusion_torch_register.restype = ctypes.c_int
            cdll.arfusion_torch_unregister.argtypes = [ctypes.c_char_p]
            cdll.arfusion_torch_unregister.restype = None
            built = int(cdll.arfusion_torch_native_api_version())
            if built != _lib.ARF_API_VERSION:
                reason = (f"{path} was built against API version {built}, this package is "
                          f"{_lib.ARF_API_VERSION}: rebuild it")
        except (OSError, RuntimeError, AttributeError) as e:
            reason = f"cannot load {path}: {e}"
    if reason is not None:
        if mode == "cpp":
            raise ImportError(f"arfusion: ARFUSION_TORCH_OPS=cpp, but {reason}")
        if path.exists() and _torch_version() >= MIN_TORCH:
            # built but unusable: say so (an unbuilt library is the documented default, not news)
            warnings.warn(f"arfusion: the C++ op kernels are not used: {reason}; running the "
                          "Python kernels", RuntimeWarning, stacklevel=2)
        _state.update(backend="python", reason=reason)
        return
    ops = frozenset(cdll.arfusion_torch_native_ops().decode().split(","))
    _state.update(backend="cpp", library=str(path), reason=f"loaded {path}", ops=ops, cdll=cdll)


def native_ops() -> frozenset:
    """The ops whose CUDA kernel is the C++ one (empty under the Python backend)."""
    return _state["ops"]


def backend() -> dict:
    """{"backend": "cpp" | "python", "library": path or None, "reason": why, "native_ops": [...]}."""
    return {"backend": _state["backend"], "library": _state["library"], "reason": _state["reason"],
            "native_ops": sorted(_state["ops"])}


def register_comm(name: str, handle: int, device_index: int) -> None:
    cdll = _state["cdll"]
    if cdll is not None and cdll.arfusion_torch_register(name.encode(), handle, device_index) != 0:
        raise RuntimeError(f"arfusion: a communicator named {name!r} already exists (C++ ops)")


def unregister_comm(name: str) -> None:
    cdll = _state["cdll"]
    if cdll is not None:
        cdll.arfusion_torch_unregister(name.encode())
