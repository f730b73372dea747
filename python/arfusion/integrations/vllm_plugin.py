"""The vLLM general plugin (entry point group ``vllm.general_plugins``, name ``arfusion``).

vLLM calls ``register()`` once in every process it starts (the API server, the engine core and
each worker). With ``ARFUSION_VLLM`` unset or ``0`` it returns at once: this module imports only
``os``, so an installed arfusion costs vLLM nothing while it is off. With ``ARFUSION_VLLM=1`` it
loads arfusion's torch operators and hooks vLLM's worker start (``arfusion.integrations.vllm``):
after vLLM's distributed initialization each worker builds the communicator from vLLM's
tensor-parallel group and installs the compile pass, turning vLLM's own all-reduce fusion off.
Anything missing then (arfusion's operators for this torch, a vLLM without the hooks this needs,
a compilation mode the pass cannot run in) raises: vLLM does not catch a plugin's errors, so the
process stops with the reason instead of serving unfused.

Any other value of ``ARFUSION_VLLM`` raises too, so a typo never reads as "off".
"""

import os

ENV = "ARFUSION_VLLM"


def enabled() -> bool:
    """Whether ARFUSION_VLLM switches the plugin on (1) or leaves it off (unset, empty or 0)."""
    value = os.environ.get(ENV, "").strip()
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise ValueError(f"arfusion: {ENV}={value!r} is neither 1 (on) nor 0 (off)")


def register() -> None:
    """The entry point vLLM calls in each of its processes."""
    if not enabled():
        return
    from . import vllm as _vllm

    _vllm.install_worker_hook()
