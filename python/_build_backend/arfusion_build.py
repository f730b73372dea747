"""PEP 517 build backend of the arfusion package: Python standard library only, nothing downloaded.

    pip install --no-build-isolation ./python        (or `.` from the repository root)

builds, with CMake, in one build directory:
  * libarfusion.so (target arfusion_shared), and
  * where the installing interpreter imports a CUDA build of torch >= 2.10, the op library
    arfusion/torch/libarfusion_torch_ops.so (target arfusion_torch_ops: csrc/ops_stable.cc compiled
    against that torch's own stable-ABI headers, targeting the 2.10 ABI so a later torch loads it);
and packs both with the Python sources into one wheel. Without a usable torch the package still
installs; arfusion/torch/ops_build.json records why the op library is missing, and
`import arfusion.torch` raises an ImportError naming that reason.

Needs cmake >= 3.25, a C++20 compiler, nvcc (the CUDA toolkit), nlohmann-json; ninja when present.
A missing tool stops the build with a message naming it.

Knobs (environment, or pip's --config-settings / -C):
  build-dir / ARFUSION_BUILD_DIR   the CMake build directory (default <repo>/build-python), kept
                                   between installs so a reinstall rebuilds only what changed. An
                                   existing configured directory (e.g. `build`) is reused as it is
                                   configured; only the torch location is set in it.
  ARF_CMAKE_ARGS                   extra configure arguments (space-separated)
  CMAKE_BUILD_PARALLEL_LEVEL       build jobs (default: the CPU count)
ccache is used when it is on PATH (CCACHE_BASEDIR defaults to the repository, so the objects of
another build directory of the same sources are cache hits).
"""

import base64
import contextlib
import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

NAME = "arfusion"
PYTHON_DIR = pathlib.Path(__file__).resolve().parent.parent  # python/
REPO = PYTHON_DIR.parent
PACKAGE = PYTHON_DIR / NAME
TORCH_MIN = (2, 10)
CMAKE_MIN = (3, 25)
OPS_LIBRARY = "libarfusion_torch_ops.so"
OPS_BUILD_INFO = "ops_build.json"  # in arfusion/torch/
SUMMARY = ("Fused tensor-parallel all-reduce + residual add + RMSNorm (+ FP8/FP4 quantization) "
           "for PyTorch, over NVLink")

# The installing interpreter's torch, as the op library needs it (run in a child process, outside
# the source tree, so the probe neither imports torch here nor picks up a directory named torch).
_TORCH_PROBE = r"""
import json, os, sys
try:
    import torch
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
    sys.exit(0)
d = os.path.dirname(os.path.abspath(torch.__file__))
print(json.dumps({"version": torch.__version__, "dir": d,
                  "cxx11_abi": int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))),
                  "cuda": torch.version.cuda,
                  "has_cuda_lib": os.path.exists(os.path.join(d, "lib", "libtorch_cuda.so"))}))
"""


def say(msg: str) -> None:
    print(f"arfusion_build: {msg}", flush=True)


def fail(msg: str):
    """Stops the build with `msg` (no traceback: the message is the diagnosis)."""
    raise SystemExit(f"\narfusion_build: cannot build the arfusion package: {msg}\n")


def _version() -> str:
    for line in (PACKAGE / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    fail("no __version__ in arfusion/__init__.py")


def _setting(config_settings, key: str, env: str):
    value = (config_settings or {}).get(key)
    return value if value else os.environ.get(env) or None


# ---- tools -------------------------------------------------------------------------------------


def _cmake() -> str:
    cmake = shutil.which("cmake")
    if not cmake:
        fail("cmake >= 3.25 is not on PATH (Debian: apt-get install cmake; or pip install cmake)")
    out = subprocess.run([cmake, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    if not m or (int(m[1]), int(m[2])) < CMAKE_MIN:
        fail(f"{cmake} is cmake {m[0] if m else '?'}; arfusion needs cmake >= 3.25")
    return cmake


def _nvcc() -> str:
    found = shutil.which("nvcc")
    if found:
        return found
    dirs = [os.path.join(os.environ["CUDA_HOME"], "bin")] if os.environ.get("CUDA_HOME") else []
    dirs.append("/usr/local/cuda/bin")
    for d in dirs:
        if os.access(os.path.join(d, "nvcc"), os.X_OK):
            return os.path.join(d, "nvcc")
    fail("nvcc (the CUDA toolkit 12.8+) is not on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin; "
         "install the toolkit or set CUDA_HOME")


def _torch() -> tuple:
    """(probe dict, None) for a torch the op library can be built against, else (None, reason)."""
    try:
        with tempfile.TemporaryDirectory() as cwd:
            done = subprocess.run([sys.executable, "-c", _TORCH_PROBE], capture_output=True,
                                  text=True, cwd=cwd, timeout=600)
        info = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError) as e:
        return None, f"probing torch with {sys.executable} failed: {e}"
    if "error" in info:
        return None, f"torch is not importable by {sys.executable} ({info['error']})"
    parts = re.findall(r"\d+", info["version"].split("+")[0])[:2]
    version = tuple(int(p) for p in parts) if len(parts) == 2 else (0, 0)
    if version < TORCH_MIN:
        return None, (f"torch {info['version']} (at {info['dir']}) is older than 2.10, the first "
                      "with the stable C++ ABI the ops are written against")
    if not info["has_cuda_lib"]:
        return None, (f"torch {info['version']} (at {info['dir']}) is a CPU-only build (no "
                      "lib/libtorch_cuda.so); the ops' kernels need a CUDA build of torch")
    return info, None


# ---- the CMake build ---------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(build_dir: pathlib.Path):
    """One build at a time per build directory (two installs at once would race in it)."""
    import fcntl

    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".arfusion_build.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _cache_value(build_dir: pathlib.Path, name: str):
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        return None
    for line in cache.read_text(errors="replace").splitlines():
        if line.startswith(name + ":"):
            return line.split("=", 1)[1]
    return None


def _build(build_dir: pathlib.Path, torch_info) -> pathlib.Path:
    cmake = _cmake()
    nvcc = _nvcc()
    env = dict(os.environ)
    args = [cmake, "-S", str(REPO), "-B", str(build_dir)]
    fresh = not (build_dir / "CMakeCache.txt").exists()
    if fresh:
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        args += ["-DCMAKE_BUILD_TYPE=Release", "-DARF_BUILD_TESTS=OFF", "-DARF_BUILD_BENCH=OFF",
                 f"-DCMAKE_CUDA_COMPILER={nvcc}"]
        if shutil.which("ccache"):
            args += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"]
    elif _cache_value(build_dir, "ARF_SANITIZE"):
        fail(f"{build_dir} is a sanitizer build (ARF_SANITIZE): its library cannot load into a plain "
             "Python interpreter; name another build directory")
    if shutil.which("ccache"):
        env.setdefault("CCACHE_BASEDIR", str(REPO))
        env.setdefault("CCACHE_NOHASHDIR", "1")
    if torch_info is not None:
        args += [f"-DARF_TORCH_DIR={torch_info['dir']}",
                 f"-DARF_TORCH_CXX11_ABI={torch_info['cxx11_abi']}"]
    else:
        args += ["-DARF_TORCH_DIR="]
    args += shlex.split(os.environ.get("ARF_CMAKE_ARGS", ""))
    say(("configuring " if fresh else "reusing ") + str(build_dir))
    if subprocess.run(args, env=env).returncode != 0:
        fail(f"CMake could not configure {build_dir} (its output is above)")
    targets = ["arfusion_shared"] + (["arfusion_torch_ops"] if torch_info is not None else [])
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
    say(f"building {', '.join(targets)} in {build_dir} (-j {jobs})")
    if subprocess.run([cmake, "--build", str(build_dir), "--target", *targets, "--parallel", jobs],
                      env=env).returncode != 0:
        fail(f"building {', '.join(targets)} failed (the compiler's output is above)")
    return build_dir


# ---- the wheel ---------------------------------------------------------------------------------


def _metadata(version: str) -> str:
    readme = (PYTHON_DIR / "README.md").read_text()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: {SUMMARY}\n"
            "Requires-Python: >=3.9\nProvides-Extra: torch\n"
            "Requires-Dist: torch>=2.10; extra == \"torch\"\n"
            f"Description-Content-Type: text/markdown\n\n{readme}")


def _python_files():
    for p in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" not in p.parts:
            yield p.relative_to(PYTHON_DIR).as_posix(), p.read_bytes()


def _entry_points() -> str:
    """entry_points.txt from pyproject.toml's [tool.arfusion.entry-points."GROUP"] tables (name =
    "module:function" lines), or "" when there are none. A plain line parser: tomllib is not in
    every Python this backend runs on."""
    out, group = [], None
    for raw in (PYTHON_DIR / "pyproject.toml").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("["):
            m = re.fullmatch(r'\[tool\.arfusion\.entry-points\."([^"]+)"\]', line)
            group = m.group(1) if m else None
            if group:
                out.append(f"[{group}]")
        elif group and line:
            m = re.fullmatch(r'([A-Za-z0-9_.-]+)\s*=\s*"([^"]+)"', line)
            if not m:
                fail(f"pyproject.toml: cannot read entry point {raw!r}")
            out.append(f"{m.group(1)} = {m.group(2)}")
    return "\n".join(out) + "\n" if out else ""


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _write_wheel(wheel_directory: str, version: str, entries: list) -> str:
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    tag = f"py3-none-{plat}"
    dist_info = f"{NAME}-{version}.dist-info"
    entries = entries + [
        (f"{dist_info}/METADATA", _metadata(version).encode()),
        (f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: arfusion_build\n"
                                f"Root-Is-Purelib: false\nTag: {tag}\n").encode()),
        (f"{dist_info}/top_level.txt", f"{NAME}\n".encode()),
    ]
    entry_points = _entry_points()
    if entry_points:
        entries.append((f"{dist_info}/entry_points.txt", entry_points.encode()))
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in entries)
    record += f"{dist_info}/RECORD,,\n"
    filename = f"{NAME}-{version}-{tag}.whl"
    stamp = (2020, 1, 1, 0, 0, 0)
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in entries:
            info = zipfile.ZipInfo(path, date_time=stamp)
            info.external_attr = (0o755 if path.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
        z.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=stamp), record)
    return filename


# ---- PEP 517 hooks -----------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []  # cmake, nvcc and torch are the installing machine's; nothing is downloaded


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    build_dir = pathlib.Path(_setting(config_settings, "build-dir", "ARFUSION_BUILD_DIR")
                             or REPO / "build-python").resolve()
    torch_info, why_not = _torch()
    if why_not:
        say(f"the torch op library is not built: {why_not}. The package installs without it; "
            "`import arfusion.torch` raises ImportError saying so")
    with _locked(build_dir):
        _build(build_dir, torch_info)
        library = build_dir / "libarfusion.so"
        if not library.is_file():
            fail(f"the build left no {library}")
        entries = list(_python_files())
        entries.append((f"{NAME}/libarfusion.so", library.read_bytes()))
        ops_info = {"library": None, "torch": None, "reason": why_not}
        if torch_info is not None:
            ops = build_dir / "torch_ops" / OPS_LIBRARY
            if not ops.is_file():
                fail(f"the build left no {ops}")
            entries.append((f"{NAME}/torch/{OPS_LIBRARY}", ops.read_bytes()))
            ops_info = {"library": OPS_LIBRARY, "torch": torch_info["version"], "reason": None}
    entries.append((f"{NAME}/torch/{OPS_BUILD_INFO}", (json.dumps(ops_info, indent=1) + "\n").encode()))
    filename = _write_wheel(wheel_directory, version, entries)
    say(f"{filename}: libarfusion.so from {build_dir}; torch op library "
        + (f"built against torch {torch_info['version']}" if torch_info else f"absent ({why_not})"))
    return filename
