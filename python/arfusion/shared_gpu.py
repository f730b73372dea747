"""Ranks as processes that share one GPU, for test and benchmark rigs (no torch needed).

NCCL refuses two ranks of one host on one GPU ("Duplicate GPU"). When every rank poses as a host
of its own (NCCL_HOSTID), NCCL joins them over loopback sockets instead; set the variables before
NCCL's first use in the process. arfusion is not fooled by it: it finds the ranks on one GPU by
UUID and uses its ipc transport. NCCL's timings over loopback mean nothing, and NVLink multicast
stays off.
"""

from __future__ import annotations


def nccl_env_for_ranks_on_one_gpu(job: str, rank: int) -> dict[str, str]:
    """The environment that lets rank `rank` of job `job` join NCCL beside mates on its GPU.

    `job` must be the same for every rank of one job and differ between jobs (e.g. a tag and the
    launcher's pid), so the host ids of one job's ranks are distinct and never collide with
    another job's.
    """
    if rank < 0:
        raise ValueError(f"rank must be >= 0, not {rank}")
    return {"NCCL_HOSTID": f"{job}-rank{rank}", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo",
            "NCCL_NVLS_ENABLE": "0"}
