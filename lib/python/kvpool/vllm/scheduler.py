# SPDX-License-Identifier: MIT
"""The connector's scheduler side: a kvpool sequence per request, opened with the prompt.
Its LOOKUP is the offer, its ALLOC with the cache the pin (until the request ends), and
its COMMIT the publication of what the workers saved. A kvpool failure is a miss or a
skipped save, counted (link.py); nothing raises into vLLM once it runs."""

import logging
from dataclasses import dataclass

import kvpool

from .geometry import check, from_vllm
from .link import Failures, Interval, Link
from .meta import Copy, KvpoolMeta

logger = logging.getLogger("kvpool.vllm")


def passthrough_reason(request):
    """Why a request is neither loaded nor saved, or None: multimodal inputs, whose KV
    depends on more than the tokens (vLLM hashes the inputs' identities; kvpool the tokens)."""
    return "multimodal" if request.mm_features else None


def salt_of(request):
    """The kvpool sequence's salt: the tenant's cache_salt and the LoRA adapter's name, so that
    two requests share KV only when both are equal (and their tokens); None when neither is
    set, so that unsalted requests share with each other."""
    lora = request.lora_request.lora_name if request.lora_request is not None else ""
    if not request.cache_salt and not lora:
        return None
    # Length-prefixed: ("ab", "c") and ("a", "bc") are different salts.
    salt = request.cache_salt or ""
    return f"{len(salt)}:{salt}{lora}".encode()


@dataclass
class _Req:
    seq: "kvpool.Sequence | None"   # None: not in kvpool (the daemon away at its offer)
    connection: int = 0   # the link's connection the sequence lives on
    local: int = 0        # vLLM's own (block-aligned) hit when we offered
    offered: int = 0      # tokens offered past it
    pinned: int = 0       # tokens the sequence holds from the pool's cache
    allocated: bool = False
    lost: bool = False    # a load of it came short: never offered again (vLLM recomputes)


class SchedulerSide:
    def __init__(self, vllm_config, kv_cache_config, extra):
        want = from_vllm(vllm_config, kv_cache_config)
        self.block_size = want.block_size
        self.pool_name = extra.get("pool")
        self.max_len = None
        # What a deployment wants to see: offers, pins cut short, saves; failures by cause.
        self.counts = dict(offered_tokens=0, loaded_tokens=0, lost_tokens=0, saved_tokens=0,
                           save_skipped=0, multimodal=0)
        self.failures = Failures(self.counts)
        self.interval = Interval(self.counts)

        def check_pool(client):
            check(self.pool_name, client.pool, want)
            self.max_len = client.pool.max_len
        self.link = Link(extra, check_pool, self.failures)
        self.link.start()
        self.reqs = {}        # request id -> _Req (None: passed through), offer to end
        self.saving = {}      # request id -> (_Req, its end, tokens copied), until reported
        self.meta = KvpoolMeta()

    def _live(self, r):
        """Whether r's sequence is on the connection the link has now."""
        return r.seq is not None and self.link.client is not None and \
            r.connection == self.link.connects

    def _close(self, r):
        if self._live(r):
            try:
                r.seq.close()
            except kvpool.Error as e:
                self.link.failed(e, "close a sequence")
        r.seq = None

    def matched(self, request, num_computed):
        why = passthrough_reason(request)
        if why:
            if request.request_id not in self.reqs:
                self.counts[why] += 1
                self.reqs[request.request_id] = None
            return 0, False
        r = self.reqs.get(request.request_id)
        if r is not None and (r.lost or not self._live(r)):
            return 0, False
        client = self.link.get()
        if client is None:
            self.reqs.setdefault(request.request_id, _Req(None))
            return 0, False
        try:
            if r is None:
                seq = client.open(list(request.prompt_token_ids), salt=salt_of(request))
                r = self.reqs[request.request_id] = _Req(seq, self.link.connects)
            elif r.allocated:
                # Preempted and back: what it pinned goes back to the cache; offer afresh.
                r.seq.free()
                r.pinned, r.allocated = 0, False
            hit = r.seq.lookup()
        except kvpool.Error as e:
            self.link.failed(e, f"request {request.request_id}: no offer")
            return 0, False
        bs = self.block_size
        # vLLM computes the last token itself, to sample the next: never offer it.
        hit = min(hit, (request.num_tokens - 1) // bs * bs)
        r.local, r.offered = num_computed, max(0, hit - num_computed)
        self.counts["offered_tokens"] += r.offered
        return r.offered, r.offered > 0

    def _pin(self, r):
        """ALLOC with the cache: the hit's blocks are this sequence's until it is freed. An
        ALLOC takes at least one new token: the block after the hit, where a save starts."""
        r.allocated = True
        r.pinned = 0
        if not self._live(r):
            return False
        try:
            r.pinned = r.seq.alloc(1, use_cache=True)
            return True
        except kvpool.Error as e:
            self.link.failed(e, "cannot pin a hit")
            return False

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
        table = []
        if got > first:
            try:
                table = r.seq.table()[0]
            except kvpool.Error as e:
                self.link.failed(e, "no block table")
                got = first
        # Every offer is answered by a load, empty or not: vLLM waits for its report.
        self.meta.loads.append(Copy(request.request_id, table[first:got],
                                    list(vllm_blocks[first:got])))
        # Evicted between the offer and the pin (or the daemon gone): vLLM recomputes.
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
        if not self._live(r):
            self.counts["save_skipped"] += 1
            return False
        bs = self.block_size
        end = min(request.num_computed_tokens, request.num_tokens, self.max_len) // bs * bs
        prompt = len(request.prompt_token_ids)
        if not r.allocated and not self._pin(r):
            self.counts["save_skipped"] += 1
            self._close(r)
            return False
        try:
            if end <= r.pinned:
                self._close(r)
                return False
            if end > prompt:
                r.seq.append(list(request.all_token_ids[prompt:end]))
            r.seq.alloc(end - r.pinned)
            table = r.seq.table()[0]
        except kvpool.Error as e:
            # The pool full, a quota, the daemon gone: nothing saved, vLLM frees its blocks.
            self.link.failed(e, f"request {request.request_id} not saved")
            self.counts["save_skipped"] += 1
            self._close(r)
            return False
        first, last = r.pinned // bs, end // bs
        self.meta.saves.append(Copy(request.request_id, table[first:last],
                                    list(block_ids[first:last])))
        self.saving[request.request_id] = (r, end, end - r.pinned)
        return True

    def saved(self, req_ids, failed):
        """The workers are done with these requests' saves: publish the ones every worker
        copied (failed: those some worker could not), then let the sequences go."""
        for req_id in req_ids:
            r, end, copied = self.saving.pop(req_id, (None, 0, 0))
            if r is None:
                continue
            if req_id in failed or not self._live(r):
                self.counts["save_skipped"] += 1
                self._close(r)
                continue
            try:
                r.seq.commit(end)
                self.counts["saved_tokens"] += copied
            except kvpool.Error as e:
                self.link.failed(e, f"request {req_id} saved but not published")
            self._close(r)

    def close(self):
        logger.info("kvpool: %s", ", ".join(f"{k} {v}" for k, v in self.counts.items()))
        for r in list(self.reqs.values()) + [s[0] for s in self.saving.values()]:
            if r is not None:
                self._close(r)
        self.link.close()
