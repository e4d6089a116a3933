# SPDX-License-Identifier: MIT
"""KV events in vLLM's wire format (daemon/events/encode.c): the batch the encoder's unit test
writes (KVPOOL_EVENTS_DUMP) decodes with the pinned vLLM's own msgspec classes
(vllm.distributed.kv_events.KVEventBatch) to exactly the events kvpool meant."""
import os
import subprocess

import msgspec
from vllm.distributed.kv_events import (AllBlocksCleared, BlockRemoved, BlockStored,
                                        KVEventBatch)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENCODER_TEST = os.path.join(ROOT, "build", "tests", "test_event_encode")


def test_vllm_decodes_kvpools_batch(tmp_path):
    out = tmp_path / "batch.msgpack"
    subprocess.run([ENCODER_TEST], env=dict(os.environ, KVPOOL_EVENTS_DUMP=str(out)),
                   check=True)
    batch = msgspec.msgpack.Decoder(type=KVEventBatch).decode(out.read_bytes())
    assert batch.ts == 1.5 and batch.data_parallel_rank is None
    assert batch.events == [
        BlockStored(block_hashes=[0xfedcba9876543210, 7], parent_block_hash=42,
                    token_ids=[1, 2, 3, 4], block_size=2, lora_id=None, medium="CPU",
                    lora_name=None, extra_keys=None, group_idx=1,
                    kv_cache_spec_kind="sliding_window", kv_cache_spec_sliding_window=128),
        BlockStored(block_hashes=[0xfedcba9876543210], parent_block_hash=None,
                    token_ids=[1, 2], block_size=2, lora_id=None, medium="GPU",
                    lora_name=None, extra_keys=None, group_idx=0,
                    kv_cache_spec_kind="full_attention"),
        BlockRemoved(block_hashes=[7], medium="DISK", group_idx=1),
        AllBlocksCleared(),
    ]
