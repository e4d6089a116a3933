# SPDX-License-Identifier: MIT
"""The connector's statistics in vLLM's form (KVConnectorStats): counters for the interval
since they were last taken, from the scheduler side (offers, hits, saves, pass-throughs,
failures by cause) and the workers (blocks and bytes copied), summed by vLLM across them and
logged as "KV Transfer metrics: ..."."""

from dataclasses import dataclass

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats


@dataclass
class KvpoolStats(KVConnectorStats):
    def reset(self):
        self.data = {}

    def aggregate(self, other):
        data = dict(self.data)
        for key, value in other.data.items():
            data[key] = data.get(key, 0) + value
        return KvpoolStats(data=data)

    def reduce(self):
        return dict(sorted(self.data.items()))

    def is_empty(self):
        return not any(self.data.values())
