"""The op kernels' exceptions as the ArfError / ValueError they stand for (no torch import:
CPU-tested).

A C++ kernel (csrc/ops_stable.cc) can only raise std::runtime_error, which torch turns into
RuntimeError; its message carries what ArfError holds.
"""

from __future__ import annotations

import re

from arfusion._lib import ArfError, Status

# "arfusion error [<status>] in <function> (communicator '<name>'[, first lost call N]): <message>",
# the C++ kernels' form of a library failure (csrc/ops_stable.cc)
_NATIVE_ERROR = re.compile(r"arfusion error \[(arf\w+)\] in (\w+) \(communicator '([^']*)'"
                           r"(?:, first lost call (\d+))?\): (.*)", re.S)


def translate_error(exc: BaseException) -> BaseException:
    """The exception an arfusion op raised, as the binding raises it: a kernel's library
    failure (RuntimeError) becomes the ArfError it stands for, its argument checks ("arfusion.<op>:
    ...") ValueError; anything else is returned unchanged."""
    if isinstance(exc, ArfError) or not isinstance(exc, RuntimeError):
        return exc
    text = str(exc)
    m = _NATIVE_ERROR.search(text)
    if m:
        status, function, comm, lost, message = m.groups()
        code = getattr(Status, status[3:], None) if status.startswith("arf") else None
        if code is not None:
            # torch may append the C++ throw site; the library's message ends at the first line
            # that torch added
            message = message.split("\nException raised from")[0].strip()
            return ArfError(int(code), message, function, int(lost) if lost else None, comm)
    m = re.search(r"arfusion\.\w+: .*", text)
    if m and "arfusion error [" not in text:
        return ValueError(m.group(0).split("\nException raised from")[0].strip())
    return exc
