# SPDX-License-Identifier: MIT
"""The connector's scheduler side: a kvpool sequence per request, opened with the prompt.
Its LOOKUP is the offer, its ALLOC with the cache the pin (until the request ends), and
its COMMIT the publication of what the workers saved."""

import logging
from dataclasses import dataclass

import kvpool

from .geometry import check, connect, from_vllm
from .meta import Copy, KvpoolMeta

logger = logging.getLogger("kvpool.vllm")
def passthrough_reason(request):
    """Why a request is neither loaded nor saved (this issue's scope), or None."""
    if request.mm_features:
        return "multimodal"
    if request.cache_salt:
        return "cache_salt"
    if request.lora_request is not None:
        return "lora"
    return None


@dataclass
class _Req:
    seq: "kvpool.Sequence"
    local: int = 0        # vLLM's own (block-aligned) hit when we offered
    offered: int = 0      # tokens offered past it
    pinned: int = 0       # tokens the sequence holds from the pool's cache
    allocated: bool = False
    lost: bool = False    # a load of it came short: never offered again (vLLM recomputes)


class SchedulerSide:
    def __init__(self, vllm_config, kv_cache_config, extra):
        want = from_vllm(vllm_config, kv_cache_config)
        self.block_size = want.block_size
        self.client = connect(extra)
        check(extra["pool"], self.client.pool, want)
        self.max_len = self.client.pool.max_len
        self.reqs = {}        # request id -> _Req, from its offer to its end
        self.saving = {}      # request id -> (sequence, its end, tokens copied), until reported
        self.meta = KvpoolMeta()
        # What a deployment wants to see: offers, pins cut short, saves, refusals.
        self.counts = dict(offered_tokens=0, loaded_tokens=0, lost_tokens=0, saved_tokens=0,
                           save_refused=0, multimodal=0, cache_salt=0, lora=0)

    def matched(self, request, num_computed):
        why = passthrough_reason(request)
        if why:
            if request.request_id not in self.reqs:
                self.counts[why] += 1
                self.reqs[request.request_id] = None
            return 0, False
        r = self.reqs.get(request.request_id)
        if r is None:
            r = self.reqs[request.request_id] = _Req(self.client.open(
                list(request.prompt_token_ids)))
        elif r.lost:
            return 0, False
        elif r.allocated:
            # Preempted and back: what it pinned goes back to the cache; offer afresh.
            r.seq.free()
            r.pinned, r.allocated = 0, False
        bs = self.block_size
        # vLLM computes the last token itself, to sample the next: never offer it.
        hit = min(r.seq.lookup(), (request.num_tokens - 1) // bs * bs)
        r.local, r.offered = num_computed, max(0, hit - num_computed)
        self.counts["offered_tokens"] += r.offered
        return r.offered, r.offered > 0

    def _pin(self, r):
        """ALLOC with the cache: the hit's blocks are this sequence's until it is freed. An
        ALLOC takes at least one new token: the block after the hit, where a save starts."""
        try:
            r.pinned = r.seq.alloc(1, use_cache=True)
        except kvpool.Error as e:
            logger.info("kvpool: cannot pin a hit: %s", e)
            r.pinned = 0
        r.allocated = True

    def allocated(self, request, blocks, num_external):
        r = self.reqs.get(request.request_id)
        # The second call, after the load, brings the blocks for the rest: nothing to do.
        if r is None or num_external == 0 or r.allocated:
            return
        self._pin(r)
        bs = self.block_size
        first, end = r.local // bs, (r.local + num_external) // bs
        got = max(first, min(r.pinned // bs, end))
        vllm_blocks = blocks.get_block_ids()[0]
        table = r.seq.table()[0] if got > first else []
        # Every offer is answered by a load, empty or not: vLLM waits for its report.
        self.meta.loads.append(Copy(request.request_id, table[first:got],
                                    list(vllm_blocks[first:got])))
        # Evicted between the offer and the pin: vLLM recomputes from there.
        self.meta.load_errors.extend(vllm_blocks[got:end])
        r.lost = got < end
        self.counts["loaded_tokens"] += (got - first) * bs
        self.counts["lost_tokens"] += (end - got) * bs

    def take_meta(self):
        meta, self.meta = self.meta, KvpoolMeta()
        return meta

    def finished(self, request, block_ids):
        """Saves the computed full blocks the pool does not hold; True while that goes on."""
        r = self.reqs.pop(request.request_id, None)
        if r is None:
            return False
        bs = self.block_size
        end = min(request.num_computed_tokens, request.num_tokens, self.max_len) // bs * bs
        prompt = len(request.prompt_token_ids)
        try:
            if not r.allocated:
                self._pin(r)
            if end <= r.pinned:
                r.seq.close()
                return False
            if end > prompt:
                r.seq.append(list(request.all_token_ids[prompt:end]))
            r.seq.alloc(end - r.pinned)
            table = r.seq.table()[0]
        except kvpool.Error as e:
            # The pool full, a quota: nothing is saved, vLLM frees its blocks now.
            logger.info("kvpool: request %s not saved: %s", request.request_id, e)
            self.counts["save_refused"] += 1
            r.seq.close()
            return False
        first, last = r.pinned // bs, end // bs
        self.meta.saves.append(Copy(request.request_id, table[first:last],
                                    list(block_ids[first:last])))
        self.saving[request.request_id] = (r.seq, end, end - r.pinned)
        return True

    def saved(self, req_ids):
        """The workers copied these requests' blocks: publish them, then let them go."""
        for req_id in req_ids:
            seq, end, copied = self.saving.pop(req_id, (None, 0, 0))
            if seq is None:
                continue
            try:
                seq.commit(end)
                self.counts["saved_tokens"] += copied
            except kvpool.Error as e:
                logger.warning("kvpool: request %s saved but not published: %s", req_id, e)
            seq.close()

    def close(self):
        logger.info("kvpool: %s", ", ".join(f"{k} {v}" for k, v in self.counts.items()))
        for r in self.reqs.values():
            if r is not None:
                r.seq.close()
        for seq, _, _ in self.saving.values():
            seq.close()
        self.client.close()
