# SPDX-License-Identifier: MIT
"""KV events as a kvpoold publishes them (kv_events): every payload of a workload, live and
replayed, decodes with the pinned vLLM's own classes (vllm.distributed.kv_events.KVEventBatch)
to exactly the events a generic msgpack decoding reads: a router built on vLLM's subscriber
reads kvpool's events unchanged."""
import os
import subprocess

import msgspec
from vllm.distributed.kv_events import (AllBlocksCleared, BlockRemoved, BlockStored,
                                        KVEventBatch)

from conftest import DAEMON, ROOT
from daemon_proc import Daemon
from kv_events_sub import Subscriber, replay

CONFIG = """
[pool.ev]
blocks = 17
block_size = 4
groups = full swa:8 chunked:8
kv_events = on
"""
CLASSES = {"BlockStored": BlockStored, "BlockRemoved": BlockRemoved,
           "AllBlocksCleared": AllBlocksCleared}


def as_vllm(event):
    """The event a generic decoding reads, as vLLM's class of its "type"."""
    fields = {k: v for k, v in event.items() if k != "type"}
    return CLASSES[event["type"]](**fields)


def test_every_payload_decodes_with_vllms_classes(tmp_path):
    d = Daemon(tmp_path, CONFIG, DAEMON)
    try:
        s = Subscriber("ipc://%s/ev.events" % tmp_path)
        with d.client(pool="ev", admin=True) as c:
            for base in (100, 200, 300, 400, 500):  # 5 blocks each: the last ones evict
                with c.open(list(range(base, base + 18))) as q:
                    q.alloc(18)
                    q.commit(18)
            c.evict(c.free_queue()[-3:])
        subprocess.run([os.path.join(ROOT, "build", "bin", "kvctl"), "-s", d.socket, "pool", "reset",
                        "ev"], check=True, capture_output=True)
        live = s.raw()
        kinds = set()
        decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        replayed = replay("ipc://%s/ev.replay" % tmp_path, 0)
        assert [seq for seq, _ in replayed[:-1]] == [seq for _, seq, _ in live]
        for (_, seq, payload), (rseq, rpayload) in zip(live, replayed):
            assert payload == rpayload
            batch = decoder.decode(payload)
            generic = msgspec.msgpack.decode(payload)
            assert isinstance(batch.ts, float) and batch.data_parallel_rank is None
            assert batch.events == [as_vllm(e) for e in generic[1]]
            kinds |= {type(e).__name__ for e in batch.events}
            for e in batch.events:
                if isinstance(e, BlockStored):
                    assert e.kv_cache_spec_kind == ["full_attention", "sliding_window",
                                                    "chunked_local_attention"][e.group_idx]
        assert kinds == set(CLASSES)
    finally:
        d.stop()
