# SPDX-License-Identifier: MIT
"""KvpoolConnector: vLLM's KV connector API over kvpool. The scheduler side (one kvpool
client in vLLM's engine-core process) finds hits, pins them and publishes what was saved;
the worker side (one client in each worker process, the pool mapped) copies blocks."""

from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    SupportsHMA,
)

from .meta import KvpoolWorkerMeta
from .scheduler import SchedulerSide
from .stats import KvpoolPromMetrics, KvpoolStats
from .worker import WorkerSide

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request


class KvpoolConnector(KVConnectorBase_V1, SupportsHMA):
    """kv_connector_extra_config: socket (kvpoold's; default $KVPOOL_SOCKET or
    /run/kvpool/kvpool.sock), pool (its name), namespace (the pool's: required to map it).
    SupportsHMA: vLLM keeps its hybrid allocator, one kvpool group per KV cache group."""

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig | None" = None):
        super().__init__(vllm_config, role, kv_cache_config)
        transfer = vllm_config.kv_transfer_config
        extra = transfer.kv_connector_extra_config or {}
        if role == KVConnectorRole.SCHEDULER:
            # A block the pool lost between offer and pin is a miss, not the request's
            # failure: vLLM recomputes from it (it reads the policy after making us).
            transfer.kv_load_failure_policy = "recompute"
            self._sched = SchedulerSide(vllm_config, kv_cache_config, extra)
            self._worker = None
        else:
            self._sched = None
            self._worker = WorkerSide(vllm_config, kv_cache_config, extra)

    @property
    def requires_kv_delivery(self) -> bool:
        # A cache: a save a preemption drops is a later miss, never a wrong token.
        return False

    # ---- scheduler side ----

    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        return self._sched.matched(request, num_computed_tokens)

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int):
        self._sched.allocated(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        return self._sched.take_meta(scheduler_output)

    def request_finished(self, request: "Request",
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        return self._sched.finished(request), None

    def request_finished_all_groups(self, request: "Request", block_ids: tuple[list[int], ...]
                                    ) -> tuple[bool, dict[str, Any] | None]:
        return self._sched.finished(request), None

    def update_connector_output(self, connector_output: "KVConnectorOutput"):
        self._sched.reported(connector_output)

    def get_kv_connector_stats(self) -> KvpoolStats | None:
        delta = (self._sched or self._worker).interval.take()
        return KvpoolStats(data=delta) if delta else None

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KvpoolStats:
        return KvpoolStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config: "VllmConfig", metric_types: dict,
                           labelnames: list[str],
                           per_engine_labelvalues: dict[int, list[object]]
                           ) -> KvpoolPromMetrics:
        return KvpoolPromMetrics(vllm_config, metric_types, labelnames,
                                 per_engine_labelvalues)

    # ---- worker side ----

    def register_kv_caches(self, kv_caches: dict[str, "torch.Tensor"]):
        self._worker.register(kv_caches)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        self._worker.load(self._get_connector_metadata())

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # start_load_kv copied every layer

    def save_kv_layer(self, layer_name: str, kv_layer: "torch.Tensor", attn_metadata: Any,
                      **kwargs: Any) -> None:
        return  # only finished requests are saved, whole, in wait_for_save

    def wait_for_save(self):
        self._worker.save(self._get_connector_metadata())

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None,
                                                                set[str] | None]:
        return self._worker.finished(finished_req_ids)

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        # A load that failed whole (several KV cache groups) is received and failed: vLLM
        # recomputes the request.
        _, received = self._worker.finished(finished_req_ids)
        return KVConnectorTransferResults(finished_recving=set(received or ()),
                                          failed_recving=self._worker.take_failed_loads())

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._worker.take_load_errors()

    def build_connector_worker_meta(self) -> KvpoolWorkerMeta | None:
        answer = self._worker.take_answer()
        return KvpoolWorkerMeta(*answer) if answer is not None else None

    def shutdown(self):
        for side in (self._sched, self._worker):
            if side is not None:
                side.close()
