# SPDX-License-Identifier: MIT
"""The connector's statistics in vLLM's forms. KvpoolStats (KVConnectorStats): counters for
the interval since they were last taken, from the scheduler side (offers, hits, saves,
pass-throughs, failures by cause) and the workers (blocks and bytes copied), summed by vLLM
across them and logged as "KV Transfer metrics: ..." (stats logging on). KvpoolPromMetrics:
the same counters on vLLM's /metrics, each vllm:kvpool_NAME_total (failures as
vllm:kvpool_failures_total{cause=...})."""

from dataclasses import dataclass

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

# What the connector counts besides failures, and what each is.
COUNTERS = {
    "offered_tokens": "Prompt tokens the pool offered vLLM (hits beyond vLLM's own cache)",
    "loaded_tokens": "Offered tokens loaded into vLLM's KV cache",
    "lost_tokens": "Offered tokens the pool lost before they could be pinned",
    "saved_tokens": "Tokens saved into the pool and published",
    "save_skipped": "Requests not saved (the pool could not take them)",
    "offers_deferred": "Scheduler steps an offer waited for its lookup (the cluster tier's "
                       "round): vLLM asked again later",
    "multimodal": "Multimodal requests passed through (their KV depends on more than tokens)",
    "prompt_embeds": "Requests with prompt embeddings passed through",
    "loaded_blocks": "Blocks copied from the pool into vLLM's KV cache",
    "saved_blocks": "Blocks copied from vLLM's KV cache into the pool",
    "loaded_bytes": "Bytes copied from the pool into vLLM's KV cache",
    "saved_bytes": "Bytes copied from vLLM's KV cache into the pool",
}
# Failures by cause (link.cause_of, worker copies): counted under their cause's name.
CAUSES = ("daemon_away", "timeout", "quota", "pool_full", "refused", "copy_failed")


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


class KvpoolPromMetrics(KVConnectorPromMetrics):
    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self.counters = {}
        for key, doc in COUNTERS.items():
            counter = self._counter_cls(name=f"vllm:kvpool_{key}", documentation=doc + ".",
                                        labelnames=labelnames)
            self.counters[key] = {idx: counter.labels(*values)
                                  for idx, values in per_engine_labelvalues.items()}
        failures = self._counter_cls(name="vllm:kvpool_failures",
                                     documentation="kvpool calls and copies that failed, by "
                                     "cause (the engine serves on, without those hits).",
                                     labelnames=labelnames + ["cause"])
        self.failures = {idx: {cause: failures.labels(*values, cause) for cause in CAUSES}
                         for idx, values in per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data, engine_idx=0):
        for key, value in transfer_stats_data.items():
            if not value:
                continue
            if key in self.counters:
                self.counters[key][engine_idx].inc(value)
            elif key in CAUSES:
                self.failures[engine_idx][key].inc(value)
