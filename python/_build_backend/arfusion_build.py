"""PEP 517 build backend of the arfusion package, standard library only.

Builds a wheel of python/arfusion (every .py file, the C++ ops' source and the arfusion header)
plus, when found, libarfusion.so:
$ARFUSION_LIBRARY, else ../build/libarfusion.so (relative to python/). A wheel that carries the
library is tagged for this platform; one without it is pure and loads $ARFUSION_LIBRARY (or the
source tree's build) at import, which the build says.
"""

import base64
import hashlib
import io
import os
import pathlib
import re
import sysconfig
import tarfile
import zipfile

NAME = "arfusion"
HERE = pathlib.Path(__file__).resolve().parent.parent  # python/
SUMMARY = ("Fused tensor-parallel all-reduce + residual add + RMSNorm (+ FP8/FP4 quantization) "
           "for PyTorch, over NVLink")


def _version() -> str:
    for line in (HERE / NAME / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise RuntimeError("arfusion_build: no __version__ in arfusion/__init__.py")


def _library():
    env = os.environ.get("ARFUSION_LIBRARY")
    if env:
        p = pathlib.Path(env)
        if not p.is_file():
            raise RuntimeError(f"arfusion_build: ARFUSION_LIBRARY={env} is not a file")
        return p
    p = HERE.parent / "build" / "libarfusion.so"
    return p if p.is_file() else None


def _metadata(version: str) -> str:
    readme = (HERE / "README.md").read_text()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: {SUMMARY}\n"
            "Requires-Python: >=3.9\nProvides-Extra: torch\n"
            "Requires-Dist: torch>=2.6; extra == \"torch\"\n"
            f"Description-Content-Type: text/markdown\n\n{readme}")


def _files():
    for p in sorted((HERE / NAME).rglob("*.py")):
        if "__pycache__" not in p.parts and "_native_build" not in p.parts:
            yield p.relative_to(HERE).as_posix(), p.read_bytes()
    # the C++ ops' source and the header it includes, so an installed package can build them
    # (arfusion.torch._native)
    for p in sorted((HERE / NAME / "torch" / "csrc").glob("*.cc")):
        yield p.relative_to(HERE).as_posix(), p.read_bytes()
    header = HERE.parent / "include" / "arfusion" / "arfusion.h"
    if header.exists():
        yield f"{NAME}/include/arfusion/arfusion.h", header.read_bytes()


def _entry_points() -> str:
    """entry_points.txt from pyproject.toml's [tool.arfusion.entry-points."GROUP"] tables (name =
    "module:function" lines), or "" when there are none. A plain line parser: tomllib is not in
    every Python this backend runs on."""
    out, group = [], None
    for raw in (HERE / "pyproject.toml").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("["):
            m = re.fullmatch(r'\[tool\.arfusion\.entry-points\."([^"]+)"\]', line)
            group = m.group(1) if m else None
            if group:
                out.append(f"[{group}]")
        elif group and line:
            m = re.fullmatch(r'([A-Za-z0-9_.-]+)\s*=\s*"([^"]+)"', line)
            if not m:
                raise RuntimeError(f"arfusion_build: pyproject.toml: cannot read entry point {raw!r}")
            out.append(f"{m.group(1)} = {m.group(2)}")
    return "\n".join(out) + "\n" if out else ""


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _tag(with_library: bool) -> str:
    if not with_library:
        return "py3-none-any"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"py3-none-{plat}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    lib = _library()
    tag = _tag(lib is not None)
    dist_info = f"{NAME}-{version}.dist-info"
    entries = list(_files())
    if lib is not None:
        entries.append((f"{NAME}/libarfusion.so", lib.read_bytes()))
        print(f"arfusion_build: bundled {lib} as {NAME}/libarfusion.so")
    else:
        print("arfusion_build: no libarfusion.so found ($ARFUSION_LIBRARY unset, "
              f"{HERE.parent / 'build' / 'libarfusion.so'} missing): the installed package will "
              "load $ARFUSION_LIBRARY at import")
    wheel_meta = (f"Wheel-Version: 1.0\nGenerator: arfusion_build\n"
                  f"Root-Is-Purelib: {'false' if lib is not None else 'true'}\nTag: {tag}\n")
    entries.append((f"{dist_info}/METADATA", _metadata(version).encode()))
    entries.append((f"{dist_info}/WHEEL", wheel_meta.encode()))
    entries.append((f"{dist_info}/top_level.txt", f"{NAME}\n".encode()))
    if _entry_points():
        entries.append((f"{dist_info}/entry_points.txt", _entry_points().encode()))
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in entries)
    record += f"{dist_info}/RECORD,,\n"
    filename = f"{NAME}-{version}-{tag}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in entries:
            info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if path.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
        z.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)), record)
    return filename


def build_sdist(sdist_directory, config_settings=None):
    version = _version()
    base = f"{NAME}-{version}"
    filename = f"{base}.tar.gz"
    members = [("pyproject.toml", (HERE / "pyproject.toml").read_bytes()),
               ("README.md", (HERE / "README.md").read_bytes()),
               ("_build_backend/arfusion_build.py", pathlib.Path(__file__).read_bytes()),
               ("PKG-INFO", _metadata(version).encode())]
    members += list(_files())
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for path, data in members:
            info = tarfile.TarInfo(f"{base}/{path}")
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return filename
