# SPDX-License-Identifier: MIT
"""python3 -m kvpool.engine: a torch engine with its KV in kvpool.

A small decoder-only transformer (engine_model.py) served with continuous batching: requests
arrive one a step, are admitted with the prefix cache, prefilled in chunks and decoded
together, one ring batch per step for the allocation and one per layer for the KV; a request
that finds the pool short preempts the newest running one (freed, requeued, re-admitted with
the cache). Where the KV lives is engine_kv.py's: kvpool through the daemon, kvpool through
a mapping, or a private torch cache (--reference)."""
import argparse
import collections
import sys
import time
from dataclasses import dataclass, field

import torch

import kvpool

from . import engine_kv
from . import engine_model as em

MAX_RUNNING = 8        # sequences decoded together, as vLLM's max_num_seqs
ADMIT_WAIT_S = 30.0    # how long a request waits for room that only other processes can free

DESCRIPTION = """\
Run a small transformer (RMSNorm, rotary positions, grouped-query attention, SwiGLU; weights
from --seed) over --requests requests with continuous batching and greedy decoding, its KV in
the kvpool pool engine-PRESET-SEED-DTYPE (created with --blocks blocks when missing, which
needs the admin feature: root or the daemon's uid). Request ID's prompt is the seed's shared
prefix (--shared-prefix tokens) and tokens drawn from (seed, ID); IDs run from --first-id.
Engines in several processes with the same --model, --seed and --dtype share one pool and hit
each other's prompts in its prefix cache.

Once every request is done it prints, in ID order,
  request ID tokens T1 ... TN prefix_hit H
(the --max-new generated tokens; H the prefix-cache hit, tokens, at its admission) and
  summary requests R tokens T seconds S tokens_per_s X min_margin M
(M the smallest top-2 logit margin of any greedy pick); how often it preempted goes to
stderr."""

EPILOG = f"""\
models (layer patterns; the pool's groups formed from them as vLLM forms them):
  llama     4 full-attention layers
  mistral   4 sliding-window layers, window 24
  gemma3    5 sliding (window 16) : 1 full, attention soft-capped at 10
  llama4    3 chunked (chunk 32) : 1 full
  rswa      4 R-SWA layers, window 12, prefix = the prompt
  cyclic    4 cyclic layers, window 24 (a ring of blocks per sequence)
geometry: vocabulary {em.VOCAB}, width {em.DIM}, {em.Q_HEADS} query heads over {em.KV_HEADS} kv \
heads of {em.HEAD_DIM}, block size {em.BLOCK_SIZE}, prefill chunks of {em.STEP_TOKENS} tokens, \
up to {MAX_RUNNING} sequences at once.

exit status: 0 done; 1 a refusal it could not work around (the message names it); 2 usage.
example: python3 -m kvpool.engine --socket /run/kvpool/kvpool.sock --model gemma3 --seed 7 \\
           --requests 8 --prompt-tokens 40 --shared-prefix 32 --max-new 24"""


@dataclass(eq=False)
class Request:
    id: int
    tokens: list           # the prompt, then every generated token
    prompt_len: int
    hit: int = None        # prefix-cache hit at its first admission
    seq: object = None     # its kvpool.Sequence
    known: int = 0         # tokens the pool's sequence has
    computed: int = 0      # positions whose KV is written
    slots: int = 0         # positions allocated
    table: list = None     # LocalStore: block tables, a tensor per group
    stuck_at: int = None   # the span end it last preempted itself at, the pool idle
    generated: list = field(default_factory=list)
    logits: list = field(default_factory=list)


@dataclass
class Item:
    """One request's part of a step: positions first..end-1, rows lo..hi-1 of the batch."""
    req: Request
    first: int
    end: int
    lo: int
    hi: int


class Engine:
    def __init__(self, model, store, max_new, keep_logits=False):
        self.model = model
        self.store = store
        self.max_new = max_new
        self.keep_logits = keep_logits
        self.preemptions = 0
        self.min_margin = float("inf")
        self.running = []
        self.waiting = collections.deque()

    def run(self, requests):
        """Serves @requests, one arriving per step, until all are done."""
        arrivals = collections.deque(requests)
        while arrivals or self.waiting or self.running:
            if arrivals:
                self.waiting.append(arrivals.popleft())
            # Running requests first, as vLLM schedules: their commits also publish what a
            # request admitted next may hit.
            preempted = self.preemptions
            spans = [(req, self._span_end(req)) for req in self.running]
            short = self.store.prepare(spans) if spans else {}
            for req, error in short.items():
                if req in self.running:
                    self._make_room(req, self._span_end(req), error)
            if self.preemptions == preempted:
                self._admit()
            if self.running:
                self._step()

    def _span_end(self, req):
        return min(req.computed + em.STEP_TOKENS, len(req.tokens))

    def _admit(self):
        deadline = None
        idle = 0
        while self.waiting and len(self.running) < MAX_RUNNING:
            req = self.waiting[0]
            try:
                hit = self.store.admit(req)
            except kvpool.NoSpace as e:
                if self.running:
                    break
                # Nothing of ours holds blocks: only other engines can free them.
                usable, used = self.store.usage()
                if not used:
                    # Refused with nothing in use, twice (once could be others leaving
                    # between the ALLOC and the count): it can never fit.
                    idle += 1
                    if idle == 2:
                        raise self._never_fits(req, f" at {len(req.tokens)} tokens", usable,
                                               e) from e
                    continue
                deadline = deadline or time.monotonic() + ADMIT_WAIT_S
                if time.monotonic() > deadline:
                    raise engine_kv.EngineError(
                        f"request {req.id}: no room in the pool for {ADMIT_WAIT_S:.0f} s with "
                        f"nothing of this engine running ({used} of {usable} blocks in use "
                        "by others)") from e
                time.sleep(0.01)
                continue
            self.waiting.popleft()
            self.running.append(req)
            if req.hit is None:
                req.hit = hit

    def _make_room(self, req, end, error):
        """Preempts the newest running requests until @req has slots up to @end, or is
        preempted itself. @error: the refusal of its ALLOC."""
        while True:
            victim = self.running.pop()
            self.store.preempt(victim)
            self.waiting.appendleft(victim)
            self.preemptions += 1
            if victim is req:
                usable, used = self.store.usage()
                if not self.running and not used:
                    # Twice at the same length, the pool idle both times: it can never fit.
                    if req.stuck_at == end:
                        raise self._never_fits(req, f" at {end} tokens", usable, error)
                    req.stuck_at = end
                return
            try:
                self.store.grow(req, end)
                return
            except kvpool.NoSpace as e:
                error = e

    @staticmethod
    def _never_fits(req, at, usable, error):
        if isinstance(error, kvpool.QuotaExceeded):
            return engine_kv.EngineError(
                f"request {req.id}{at}: {error.reason or error.strerror}, with nothing of "
                "this engine running: a quota of this uid or namespace is too small for it "
                "(kvctl clients shows the quotas)")
        return engine_kv.EngineError(
            f"request {req.id}{at} needs more blocks than the pool has ({usable} usable, none "
            "in use): use a pool with more blocks (--blocks when this engine creates it)")

    def _step(self):
        items, tokens, positions, rows = [], [], [], []
        lo = 0
        for req in self.running:
            first, end = req.computed, min(req.slots, self._span_end(req))
            items.append(Item(req, first, end, lo, lo + end - first))
            tokens += req.tokens[first:end]
            positions += range(first, end)
            lo += end - first
            if end == len(req.tokens):
                rows.append(lo - 1)
        device = self.model.device
        logits = self.model.forward(
            torch.tensor(tokens, device=device), torch.tensor(positions, device=device),
            lambda layer, q, k, v: self.store.attend(layer, items, q, k, v), rows)
        row = 0
        for it in items:
            self.store.computed(it.req, it.end)
            if it.end < len(it.req.tokens):
                continue  # a prefill chunk that does not reach the last token
            self._sample(it.req, logits[row])
            row += 1

    def _sample(self, req, logits):
        top = torch.topk(logits, 2)
        self.min_margin = min(self.min_margin, float(top.values[0] - top.values[1]))
        token = int(top.indices[0])
        req.generated.append(token)
        req.tokens.append(token)
        if self.keep_logits:
            req.logits.append(logits.detach().to("cpu"))
        if len(req.generated) == self.max_new:
            self.store.finish(req)
            self.running.remove(req)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m kvpool.engine", description=DESCRIPTION,
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", metavar="PATH",
                   help="kvpoold's socket (default: $KVPOOL_SOCKET, else /run/kvpool/kvpool.sock)")
    p.add_argument("--model", metavar="PRESET", required=True, choices=list(em.PRESETS),
                   help="the layer pattern: " + ", ".join(em.PRESETS))
    p.add_argument("--seed", metavar="N", type=int, default=0,
                   help="draws the weights, the shared prefix and the prompts (default 0)")
    p.add_argument("--first-id", metavar="N", type=int, default=0,
                   help="the first request's ID (default 0)")
    p.add_argument("--requests", metavar="N", type=int, default=8, help="requests (default 8)")
    p.add_argument("--prompt-tokens", metavar="N", type=int, default=40,
                   help="tokens in each prompt (default 40)")
    p.add_argument("--shared-prefix", metavar="N", type=int, default=32,
                   help="leading prompt tokens every request shares (default 32)")
    p.add_argument("--max-new", metavar="N", type=int, default=24,
                   help="tokens each request generates (default 24)")
    p.add_argument("--blocks", metavar="N", type=int, default=0,
                   help="blocks of a pool this engine creates (default: enough for every "
                        "request at once)")
    p.add_argument("--namespace", metavar="NAME", default="",
                   help="connect in this namespace; a pool created is restricted to it")
    p.add_argument("--attend", choices=("daemon", "local"), default="daemon",
                   help="daemon: WRITE_KV and ATTEND through kvpoold (default); local: write "
                        "and attend in torch over the pool mapped into this process (needs "
                        "--namespace)")
    p.add_argument("--reference", action="store_true",
                   help="no kvpool: a private torch KV cache per sequence, the same masks")
    p.add_argument("--dtype", choices=("f32", "bf16"), default="f32",
                   help="the KV's dtype (weights and activations are f32; default f32)")
    p.add_argument("--device", metavar="cpu|cuda", default="cpu",
                   help="where the model runs (cuda: needs a cuda pool; default cpu)")
    args = p.parse_args(argv)
    for name in ("requests", "prompt_tokens", "max_new"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("seed", "first_id", "blocks"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must not be negative")
    if args.blocks == 1:
        p.error("--blocks must be at least 2 (block 0 is the null block)")
    if not 0 <= args.shared_prefix <= args.prompt_tokens:
        p.error("--shared-prefix must be 0..--prompt-tokens")
    if args.device not in ("cpu", "cuda") and not (args.device.startswith("cuda:") and
                                                   args.device[5:].isdigit()):
        p.error(f"--device {args.device}: cpu or cuda[:N]")
    if args.attend == "local" and not args.namespace and not args.reference:
        p.error("--attend local maps the pool, and only a pool restricted to a namespace can "
                "be mapped: give --namespace NAME")
    return args


def make_requests(args):
    return [Request(rid, em.prompt_tokens(args.seed, rid, args.prompt_tokens,
                                          args.shared_prefix), args.prompt_tokens)
            for rid in range(args.first_id, args.first_id + args.requests)]


def open_store(args, model):
    if args.reference:
        return engine_kv.ReferenceStore(model, args.dtype, args.max_new)
    client = engine_kv.connect(args, model)
    try:
        if args.attend == "local":
            return engine_kv.LocalStore(client, model, args.dtype, args.namespace)
        return engine_kv.DaemonStore(client, model, args.dtype)
    except BaseException:
        client.close()
        raise


def run(args, keep_logits=False):
    """Runs the engine as the command line says; (engine, requests, seconds)."""
    if args.device != "cpu" and not torch.cuda.is_available():
        raise engine_kv.EngineError(f"--device {args.device}: torch sees no CUDA device")
    model = em.Model(args.model, args.seed, args.device)
    store = open_store(args, model)
    try:
        requests = make_requests(args)
        engine = Engine(model, store, args.max_new, keep_logits)
        start = time.monotonic()
        engine.run(requests)
        seconds = time.monotonic() - start
    finally:
        store.close()
    return engine, requests, seconds


def main(argv=None):
    args = parse_args(argv)
    try:
        engine, requests, seconds = run(args)
    except (kvpool.Error, engine_kv.EngineError) as e:
        print(f"kvpool.engine: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    tokens = sum(len(req.generated) for req in requests)
    for req in requests:
        print(f"request {req.id} tokens {' '.join(map(str, req.generated))} "
              f"prefix_hit {req.hit}")
    print(f"summary requests {len(requests)} tokens {tokens} seconds {seconds:.3f} "
          f"tokens_per_s {tokens / seconds:.1f} min_margin {engine.min_margin:.6f}", flush=True)
    print(f"kvpool.engine: {engine.preemptions} preemptions", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
