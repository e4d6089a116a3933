# SPDX-License-Identifier: MIT
"""What the scheduler side tells the worker side each step: block ids only (they cross
processes; kvpool sequence handles never do)."""

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorWorkerMetadata,
)


@dataclass
class Copy:
    """One request's copy: pool_blocks[i] <-> vllm_blocks[i], for every layer."""
    req_id: str
    pool_blocks: list[int]
    vllm_blocks: list[int]


@dataclass
class KvpoolMeta(KVConnectorMetadata):
    # Pool -> vLLM, then report the request as received.
    loads: list[Copy] = field(default_factory=list)
    # vLLM blocks offered for a load that the pool lost before they were pinned: the
    # worker reports them as failed loads, and vLLM recomputes from the first of them.
    load_errors: list[int] = field(default_factory=list)
    # vLLM -> pool, once the request is finished; then report it as sent.
    saves: list[Copy] = field(default_factory=list)


@dataclass
class KvpoolWorkerMeta(KVConnectorWorkerMetadata):
    """What the workers tell the scheduler side: saves some worker could not make, which it
    must not publish (a worker's KV missing from a block would be served as garbage)."""
    failed_saves: set[str] = field(default_factory=set)

    def aggregate(self, other):
        return KvpoolWorkerMeta(self.failed_saves | other.failed_saves)
