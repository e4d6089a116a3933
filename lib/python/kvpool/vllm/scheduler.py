# SPDX-License-Identifier: MIT
"""The connector's scheduler side: a kvpool sequence per request, opened with the prompt.
Its LOOKUP is the offer and its ALLOC with the cache the pin; then, step by step, the full
blocks vLLM computes are allocated in it, copied by the workers after the forward and
COMMITted (published) once every worker has answered for the step. Saving as blocks are
computed, not when the request ends, is what keeps a sliding-window group's blocks: vLLM
drops them once the window has moved past. A kvpool failure is a miss or a skipped save,
counted (link.py); nothing raises into vLLM once it runs."""

import errno
import logging
from dataclasses import dataclass, field

import kvpool

from .geometry import ConfigError, check, from_vllm
from .kv_layout import LAYOUT_VERSION
from .link import Failures, Interval, Link
from .meta import Copy, KvpoolMeta

logger = logging.getLogger("vllm.kvpool")  # vLLM configures its "vllm" logger


def passthrough_reason(request):
    """Why a request is neither loaded nor saved, or None: multimodal inputs or prompt
    embeddings, whose KV depends on more than the tokens (vLLM hashes the inputs' identities;
    kvpool the tokens)."""
    if request.mm_features:
        return "multimodal"
    if request.prompt_token_ids is None or getattr(request, "prompt_embeds", None) is not None:
        return "prompt_embeds"
    return None


def salt_of(request):
    """The kvpool sequence's salt: the KV layout's version (kv_layout.LAYOUT_VERSION: a pool
    written by a connector that stored K and V otherwise never feeds this one), the tenant's
    cache_salt and the LoRA adapter's name, so that two requests share KV only when all are
    equal (and their tokens)."""
    lora = request.lora_request.lora_name if request.lora_request is not None else ""
    # Length-prefixed: ("ab", "c") and ("a", "bc") are different salts.
    salt = request.cache_salt or ""
    return f"kvpool.vllm/{LAYOUT_VERSION}:{len(salt)}:{salt}{lora}".encode()


def lookup_wait_of(extra):
    """kv_connector_extra_config's lookup_wait_ms, in seconds."""
    wait = extra.get("lookup_wait_ms", 0.5)
    try:
        seconds = float(wait) / 1000
    except (TypeError, ValueError):
        seconds = -1
    if not seconds >= 0:
        raise ConfigError(f"lookup_wait_ms {wait!r}: milliseconds, 0 or more")
    return seconds


@dataclass
class _Req:
    seq: "kvpool.Sequence | None"   # None: not in kvpool (the daemon away, or let go)
    request: object = None  # vLLM's Request (its tokens grow as it decodes)
    connection: int = 0     # the link's connection the sequence lives on
    local: int = 0          # vLLM's own (block-aligned) hit when we offered
    offered: int = 0        # tokens offered past it
    pinned: int = 0         # tokens the sequence holds from the pool's cache
    allocated: bool = False
    lost: bool = False      # a load of it came short: never offered again (vLLM recomputes)
    known: int = 0          # tokens the sequence has
    committed: int = 0      # tokens published (the sequence's computed count)
    planned: int = 0        # tokens allocated and handed to the workers (>= committed)
    table: list = field(default_factory=list)  # vLLM's block table per group, as scheduled
    pool_new: list = field(default_factory=list)  # per group: position -> block, allocated
    #                                              and not yet handed to the workers
    lookup: object = None   # a kvpool.Lookup out: the offer waits for its answer
    busy: int = 0           # copies of its blocks in flight, or made and not published
    stopped: bool = False   # saves stopped (a failure): never published past committed
    ended: bool = False     # vLLM finished it: let go once nothing is in flight


class SchedulerSide:
    def __init__(self, vllm_config, kv_cache_config, extra):
        want = from_vllm(vllm_config, kv_cache_config)
        self.block_size = want.block_size
        self.hybrid = len(want.groups) > 1
        self.pool_name = extra.get("pool")
        self.max_len = None
        # What a deployment wants to see: offers, pins cut short, saves; failures by cause.
        self.counts = dict(offered_tokens=0, loaded_tokens=0, lost_tokens=0, saved_tokens=0,
                           save_skipped=0, multimodal=0, prompt_embeds=0, offers_deferred=0)
        # How long an offer waits for its LOOKUP before vLLM is told to ask again later
        # (None): a local answer comes in tens of microseconds, a cluster's takes a round.
        self.lookup_wait = lookup_wait_of(extra)
        self.num_groups = len(want.groups)
        self.failures = Failures(self.counts)
        self.interval = Interval(self.counts)

        def check_pool(client):
            check(self.pool_name, client.pool, want)
            self.max_len = client.pool.max_len
        # A dropped connection is closed only once no copy of its sequences' blocks is in
        # flight (_reap): closing it frees them, and another client could take one that a
        # worker is still writing.
        self.link = Link(extra, check_pool, self.failures, defer_close=True)
        self.link.start()
        self.reqs = {}        # request id -> _Req (None: passed through), offer to end
        self.plans = {}       # step -> [(_Req, end, tokens)]: saves awaiting the workers
        self.to_publish = []  # [(_Req, end, tokens)]: saves made, for the next step's batch
        self.loading = {}     # request id -> _Req: loads awaiting the workers
        self.lingering = []   # ended requests whose LOOKUP is still out: closed once back
        self.step = 0
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

    def _settle(self, r):
        """Lets r's sequence go once vLLM is done with it and no copy of its blocks is in
        flight: a block released under a worker's copy could be another request's by then.
        A LOOKUP out holds it in the daemon: closed once that is back."""
        if r.ended and r.busy == 0:
            if r.lookup is not None and self._live(r) and not self._lookup_back(r):
                self.lingering.append(r)
                return
            r.lookup = None
            self._close(r)

    def _lookup_back(self, r):
        try:
            return r.lookup.done()
        except kvpool.Error:
            return True  # the connection's failure: its next call says it

    def _linger(self):
        """Closes the ended requests whose LOOKUP came back since."""
        if self.lingering:
            waiting, self.lingering = self.lingering, []
            for r in waiting:
                self._settle(r)

    def _reap(self):
        """Closes the dropped connections no request in flight still has blocks on."""
        if not self.link.retired:
            return
        busy = {r.connection for r in list(self.reqs.values()) + list(self.loading.values()) +
                [e[0] for ps in self.plans.values() for e in ps] +
                [e[0] for e in self.to_publish] if r is not None and r.busy}
        self.link.close_retired(keep=busy)

    def _stop_saving(self, r):
        if not r.stopped:
            r.stopped = True
            self.counts["save_skipped"] += 1

    # ---- offers and loads ----

    def matched(self, request, num_computed):
        why = passthrough_reason(request)
        if why:
            if request.request_id not in self.reqs:
                self.counts[why] += 1
                self.reqs[request.request_id] = None
            return 0, False
        r = self.reqs.get(request.request_id)
        if r is not None and r.lookup is not None:
            return self._offer(r, request, num_computed, 0)
        if r is not None and (r.lost or r.busy or not self._live(r)):
            return 0, False
        client = self.link.get()
        if client is None:
            self.reqs.setdefault(request.request_id, _Req(None, request))
            return 0, False
        try:
            if r is None:
                prompt = list(request.prompt_token_ids)
                seq = client.open(prompt, salt=salt_of(request))
                r = self.reqs[request.request_id] = _Req(seq, request, self.link.connects,
                                                         known=len(prompt))
            elif r.allocated:
                # Preempted and back: its blocks go back to the cache (what it published
                # stays hittable, for itself too); offer afresh.
                r.seq.free()
                r.pinned = r.committed = r.planned = 0
                r.allocated = False
            # Without waiting: a pool with a cluster tier may ask the network, and the
            # scheduler has other requests to serve meanwhile.
            r.lookup = r.seq.lookup_async()
        except kvpool.Error as e:
            self.link.failed(e, f"request {request.request_id}: no offer")
            return 0, False
        return self._offer(r, request, num_computed, self.lookup_wait)

    def _offer(self, r, request, num_computed, wait):
        """The offer once r's LOOKUP is back (waiting for it up to wait seconds); until then
        None, vLLM's "not known yet": it asks again at a later step, scheduling others."""
        if not self._live(r):
            r.lookup = None  # its connection dropped: the request is a miss from here
            return 0, False
        try:
            hit = r.lookup.result(timeout=wait)
        except kvpool.Error as e:  # before TimeoutError: kvpool.Timeout is one too
            r.lookup = None
            self.link.failed(e, f"request {request.request_id}: no offer")
            return 0, False
        except TimeoutError:
            self.counts["offers_deferred"] += 1
            return None, False
        r.lookup = None
        bs = self.block_size
        # vLLM computes the last token itself, to sample the next: never offer it.
        hit = min(hit, (request.num_tokens - 1) // bs * bs)
        r.local, r.offered = num_computed, max(0, hit - num_computed)
        self.counts["offered_tokens"] += r.offered
        return r.offered, r.offered > 0

    def _pin(self, r):
        """ALLOC with the cache: the hit's blocks are this sequence's until it is freed. An
        ALLOC takes at least one new token: the block after the hit, where saves start."""
        r.allocated = True
        r.pinned = r.committed = r.planned = 0
        if not self._live(r):
            return False
        r.pool_new = []
        result = next(self._batch(lambda b: b.alloc(r.seq, 1, use_cache=True, blocks=True), 1))
        if isinstance(result, Exception):
            # Refused, or done with its blocks unknown: either way nothing of this sequence
            # is saved, ever.
            self.link.failed(result, "cannot pin a hit")
            self._stop_saving(r)
            return False
        hit, lists = result
        r.pinned = r.committed = r.planned = hit
        r.pool_new = [{} for _ in lists]
        self._absorb(r, hit + 1, lists)
        return True

    def _absorb(self, r, slots, lists):
        """An ALLOC's new blocks, which end each group's table: their positions, up to the
        slots the sequence then has (the pool's length caps them), for the saves to come."""
        last = -(-min(slots, self.max_len or slots) // self.block_size)
        for pending, ids in zip(r.pool_new, lists):
            pending.update(zip(range(last - len(ids), last), ids))

    def allocated(self, request, blocks, num_external):
        r = self.reqs.get(request.request_id)
        # The second call, after the load, brings the blocks for the rest: nothing to do.
        if r is None or num_external == 0 or r.allocated:
            return
        self._pin(r)
        bs = self.block_size
        first, end = r.local // bs, (r.local + num_external) // bs
        table = []
        if r.pinned > first * bs:
            try:
                table = r.seq.table()
            except kvpool.Error as e:
                self.link.failed(e, "no block table")
        # Per group, the blocks vLLM allocated for the hit (a sliding-window group has
        # nulls, block 0, below its window) and the pool's at the same positions: up to
        # the first the pool no longer holds (evicted between offer and pin, or the
        # daemon gone).
        got, pools, vllms = end, [], []
        held = r.pinned // bs
        for g, vllm_table in enumerate(blocks.get_block_ids()):
            pool_table = table[g] if g < len(table) else []
            ps, vs = [], []
            for i in range(first, end):
                if not vllm_table[i]:
                    continue
                p = pool_table[i] if i < min(held, len(pool_table)) else 0
                if not p:
                    got = min(got, i)
                    break
                ps.append(p)
                vs.append(vllm_table[i])
            pools.append(ps)
            vllms.append(vs)
        r.lost = got < end
        if r.lost and self.hybrid:
            # vLLM takes a load error of a model with several groups only for the whole
            # request: it recomputes it. The pin is let go (nothing copies from it).
            self.meta.failed_loads.append(request.request_id)
            self.counts["lost_tokens"] += (end - first) * bs
            self._unpin(r)
            return
        if r.lost:
            # One group: what came before the first miss is loaded, and vLLM recomputes
            # from the first block it failed to get.
            self.meta.load_errors.extend(b for b in blocks.get_block_ids()[0][got:end] if b)
        # Every offer is answered by a load, empty or not: vLLM waits for its report.
        self.meta.loads.append(Copy(request.request_id, pools, vllms))
        r.busy += 1
        self.loading[request.request_id] = r
        self.counts["loaded_tokens"] += (got - first) * bs
        self.counts["lost_tokens"] += (end - got) * bs

    def _unpin(self, r):
        r.allocated = False
        r.pinned = r.committed = r.planned = 0
        if self._live(r):
            try:
                r.seq.free()
            except kvpool.Error as e:
                self.link.failed(e, "free a sequence")

    # ---- saves, step by step ----

    def take_meta(self, so):
        """The step's metadata: the loads planned since the last step, and the saves of the
        full blocks this step computes. The publication of the last step's saves and this
        step's allocations go to the daemon together, in one batch (one wake-up a step)."""
        self.step += 1
        self._linger()
        self._reap()
        meta, self.meta = self.meta, KvpoolMeta()
        meta.step = self.step
        due = self._due(so)
        publish, self.to_publish = self.to_publish, []
        if due or publish:
            plans = self._submit(publish, due)
            if plans:
                meta.saves = [copy for copy, _, _, _ in plans]
                self.plans[self.step] = [(r, end, tokens) for _, r, end, tokens in plans]
        # Which daemon's block ids these are: a worker whose connection reaches another
        # run of it (restarted since) makes none of the copies.
        meta.boot_id = self.link.client.boot_id if self.link.client is not None else 0
        return meta

    def _due(self, so):
        """[(r, end)]: the requests this step completes a block of, to save up to end. On the
        way, vLLM's block tables as its workers keep them: a new request's whole, a running
        one's grown by its new blocks (blocks vLLM drops behind a window stay listed: only
        the positions a step computes are read, and those are current). Once per running
        request per step, so as little as can be."""
        bs, reqs, scheduled, due = self.block_size, self.reqs, so.num_scheduled_tokens, []

        def check(r, end):
            # Only tokens vLLM has accepted (not speculative ones), within the pool's length.
            if end >= r.planned + bs and not (r.stopped or r.ended):
                end = min(end, r.request.num_tokens, self.max_len or 0) // bs * bs
                if end > r.planned and self._live(r):
                    due.append((r, end))

        for new in so.scheduled_new_reqs:
            r = reqs.get(new.req_id)
            if r is not None:
                r.table = [list(ids) for ids in new.block_ids]
                check(r, new.num_computed_tokens + scheduled[new.req_id])
        cached = so.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", None)
        for req_id, ids, start in zip(cached.req_ids, cached.new_block_ids,
                                      cached.num_computed_tokens):
            r = reqs.get(req_id)
            if r is None:
                continue
            if ids is not None:
                if resumed and req_id in resumed:
                    r.table = [list(g) for g in ids]
                else:
                    for table, more in zip(r.table, ids):
                        table.extend(more)
            check(r, start + scheduled[req_id])
        return due

    def _submit(self, publish, due):
        """COMMITs of the saves the workers made (publish: [(r, end, tokens)]), then, for the
        requests due ([(r, end)]), their tokens appended and their blocks allocated, in one
        batch. Returns [(Copy, r, end, tokens)]: the pool's new blocks of each request due
        against vLLM's at the same positions."""
        for r, _ in due:
            if not r.allocated and not self._pin(r):
                self._stop_saving(r)
        due = [(r, end) for r, end in due if not r.stopped and end > r.planned and
               self._live(r)]
        publish = self._still_live(publish)
        if not publish and not due:
            return []
        # What each sequence's computed count is once the batch's COMMITs are done: a later
        # ALLOC counts its new tokens from there.
        base = {id(r): r.committed for r, _ in due}
        for r, end, _ in publish:
            base[id(r)] = end
        def ops(b):
            for r, end, _ in publish:
                b.commit(r.seq, end)
            for r, end in due:
                if end > r.known:
                    b.append(r.seq, list(r.request.all_token_ids[r.known:end]))
                b.alloc(r.seq, end - base[id(r)], blocks=True)
        results = self._batch(ops, len(publish) + sum(2 if end > r.known else 1
                                                      for r, end in due))
        self._published(publish, results)
        plans = []
        for r, end in due:
            outcomes = [next(results) for _ in range(2 if end > r.known else 1)]
            failed = next((x for x in outcomes if isinstance(x, Exception)), None)
            if end > r.known and not isinstance(outcomes[0], Exception):
                r.known = end
            if failed is not None:
                # The pool full, a quota, the daemon gone: nothing more saved of it.
                self.link.failed(failed, f"request {r.request.request_id} not saved")
                self._stop_saving(r)
            elif not r.stopped:
                self._absorb(r, end, outcomes[-1][1])
                plan = self._plan_copy(r, end)
                if plan is not None:
                    plans.append(plan)
        return plans

    def _plan_copy(self, r, end):
        """(Copy, r, end, tokens) from the pool's new blocks of r up to end to vLLM's at the
        same positions, or None when vLLM does not hold one of them."""
        bs = self.block_size
        if len(r.pool_new) != self.num_groups:
            self._stop_saving(r)  # the pool's blocks for it are not known: nothing to pair
            return None
        pools, vllms = [], []
        for g, pending in enumerate(r.pool_new):
            vllm_table = r.table[g] if g < len(r.table) else []
            ps, vs = [], []
            for i in range(r.planned // bs, end // bs):
                p = pending.pop(i, None)
                if p == 0:
                    continue  # the pool dropped it: behind the window of every later hit
                v = vllm_table[i] if i < len(vllm_table) else 0
                if p is None or not v:
                    # A block the pool did not say it allocated, or one vLLM holds no KV of
                    # (its own hit began past our last publication, behind a window): the
                    # pool's block could not be filled.
                    self._stop_saving(r)
                    return None
                ps.append(p)
                vs.append(v)
            pools.append(ps)
            vllms.append(vs)
        tokens = end - r.planned
        r.planned = end
        r.busy += 1
        return Copy(r.request.request_id, pools, vllms), r, end, tokens

    def reported(self, output):
        """The workers' answers for a step: loads received, saves made (or not). A save
        every worker made is published with the next step's batch, or at once when its
        request has ended (no next step may come for it)."""
        for req_id in output.finished_recving or ():
            r = self.loading.pop(req_id, None)
            if r is not None:
                r.busy -= 1
                self._settle(r)
        worker = output.kv_connector_worker_meta
        step = getattr(worker, "step", None)
        if step is None:
            return
        now = []
        for s in sorted(self.plans):
            if s > step:
                break
            for r, end, tokens in self.plans.pop(s):
                # A step before this one that no worker answered for is not published.
                if s < step or r.request.request_id in worker.failed_saves or \
                        not self._live(r) or r.stopped:
                    self._stop_saving(r)
                    r.busy -= 1
                    self._settle(r)
                else:
                    (now if r.ended else self.to_publish).append((r, end, tokens))
        self._publish(now)
        self._reap()

    def _still_live(self, entries):
        """The publish entries whose sequence is on the link's connection; the others are
        not published (their daemon is gone, or another connection holds them)."""
        live = []
        for e in entries:
            if self._live(e[0]):
                live.append(e)
            else:
                self._stop_saving(e[0])
                e[0].busy -= 1
                self._settle(e[0])
        return live

    def _publish(self, entries):
        """COMMITs of saves the workers made, in one batch, now."""
        entries = self._still_live(entries)
        if not entries:
            return

        def ops(b):
            for r, end, _ in entries:
                b.commit(r.seq, end)
        self._published(entries, self._batch(ops, len(entries)))

    def _batch(self, ops, count):
        """Runs ops(batch) as one kvpool batch: an iterator over its count results, each a
        value or the exception of that operation."""
        try:
            if self.link.client is None:
                raise kvpool.Disconnected(errno.ENOTCONN, "the daemon's connection is gone")
            with self.link.client.batch() as b:
                ops(b)
            return iter(b.results)
        except Exception as e:  # nothing raises into vLLM: each operation failed with it
            # kvpool.BatchError carries every operation's result; anything else (the
            # connection itself, a sequence of another connection) leaves none known.
            if not isinstance(e, kvpool.Error):
                e = kvpool.Error(errno.EINVAL, f"batch: {e!r}")
            return iter(getattr(e, "results", None) or [e] * count)

    def _published(self, entries, results):
        """What the COMMITs of entries answered (results, in order): published, or saving
        that request stops; then the sequence may go."""
        for r, end, tokens in entries:
            result = next(results)
            r.busy -= 1
            if isinstance(result, Exception):
                self.link.failed(result, f"request {r.request.request_id} saved but not "
                                 "published")
                self._stop_saving(r)
            else:
                r.committed = end
                self.counts["saved_tokens"] += tokens
            self._settle(r)

    def finished(self, request):
        """vLLM is done with the request: its saves were made step by step, so vLLM frees its
        blocks at once; what the workers saved of it is published now, and the sequence goes
        when its last copies are answered for."""
        r = self.reqs.pop(request.request_id, None)
        if r is not None:
            r.ended = True
            mine = [e for e in self.to_publish if e[0] is r]
            if mine:
                self.to_publish = [e for e in self.to_publish if e[0] is not r]
                self._publish(mine)
            self._settle(r)
        return False

    def close(self):
        publish, self.to_publish = self.to_publish, []
        self._publish(publish)  # one batch: the line then counts them
        # Before the sequences' closes: vLLM kills the engine core 5 s after SIGTERM.
        logger.info("kvpool: %s", ", ".join(f"{k} {v}" for k, v in self.counts.items()))
        for r in list(self.reqs.values()) + [p[0] for ps in self.plans.values() for p in ps] + \
                self.lingering:
            if r is not None:
                if r.lookup is not None and self._live(r):
                    try:
                        r.lookup.result(timeout=1)  # a round's deadline at most
                    except (TimeoutError, kvpool.Error):
                        pass
                self._close(r)
        self.link.close()
