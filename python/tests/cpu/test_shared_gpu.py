"""The NCCL environment for ranks that share one GPU (arfusion.shared_gpu)."""

import unittest

from arfusion.shared_gpu import nccl_env_for_ranks_on_one_gpu


class NcclEnvForRanksOnOneGpu(unittest.TestCase):
    def test_host_ids_differ_per_rank_and_per_job(self):
        ids = {nccl_env_for_ranks_on_one_gpu(job, r)["NCCL_HOSTID"]
               for job in ("e2e-100", "e2e-101") for r in range(8)}
        self.assertEqual(len(ids), 16)

    def test_loopback_without_infiniband_or_multicast(self):
        env = nccl_env_for_ranks_on_one_gpu("t-1", 3)
        self.assertEqual(env["NCCL_SOCKET_IFNAME"], "lo")
        self.assertEqual(env["NCCL_IB_DISABLE"], "1")
        self.assertEqual(env["NCCL_NVLS_ENABLE"], "0")

    def test_negative_rank_is_refused(self):
        with self.assertRaises(ValueError):
            nccl_env_for_ranks_on_one_gpu("t-1", -1)


if __name__ == "__main__":
    unittest.main()
