# SPDX-License-Identifier: MIT
"""What the scheduler side tells the worker side each step, and what the workers answer:
block ids only (they cross processes; kvpool sequence handles never do)."""

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorWorkerMetadata,
)


@dataclass
class Copy:
    """One request's copy, per KV cache group g: pool_blocks[g][i] <-> vllm_blocks[g][i], for
    every layer of group g. A sliding-window group lists only its window's blocks."""
    req_id: str
    pool_blocks: list[list[int]]
    vllm_blocks: list[list[int]]


@dataclass
class KvpoolMeta(KVConnectorMetadata):
    step: int = 0
    # The daemon run (Client.boot_id) the block ids below belong to; 0: not known.
    boot_id: int = 0
    # Pool -> vLLM before the forward, then report the request as received.
    loads: list[Copy] = field(default_factory=list)
    # vLLM blocks offered for a load that the pool lost before they were pinned: the
    # worker reports them as failed loads, and vLLM recomputes from the first of them
    # (one KV cache group: vLLM takes block ids).
    load_errors: list[int] = field(default_factory=list)
    # Requests whose load the pool cannot serve whole (several KV cache groups: vLLM takes
    # only whole requests, and recomputes them).
    failed_loads: list[str] = field(default_factory=list)
    # vLLM -> pool after the forward: the full blocks this step computed, before vLLM may
    # drop them (a sliding window moving on); the scheduler side publishes them once every
    # worker has answered for this step.
    saves: list[Copy] = field(default_factory=list)


@dataclass
class KvpoolWorkerMeta(KVConnectorWorkerMetadata):
    """A worker's answer for a step with saves: which of them it could not make, which the
    scheduler side must not publish (a worker's KV missing from a block would be served as
    garbage). vLLM merges the workers' answers for the step with aggregate()."""
    step: int = 0
    failed_saves: set[str] = field(default_factory=set)

    def aggregate(self, other):
        return KvpoolWorkerMeta(max(self.step, other.step),
                                self.failed_saves | other.failed_saves)
