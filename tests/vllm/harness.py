# SPDX-License-Identifier: MIT
"""Drive vLLM v1's real Scheduler (with its KVCacheManager and KV connector factory)
offline on the CPU, with a fake model runner of ours in place of the GPU worker.

The scheduler side is vLLM's own code, set up as EngineCore sets it up (vllm 0.33.0:
v1/engine/core.py). The worker side mirrors Model Runner V2's KV connector calls
(v1/worker/gpu/kv_connector.py), which is the runner 0.33.0 picks by default. The
"model" writes a known K and V (kv_value) for every token it computes, so a test can
tell which KV came from the forward and which a connector loaded.

KV tensors are what 0.33.0 hands register_kv_caches: per layer a view
[num_blocks, num_kv_heads, block_size, 2 * head_size] (K in the first head_size
entries of the last dim, V in the rest) over one int8 buffer, its strides set by the
resolved KVCacheLayout (LBNHC for FlashAttention: memory order block, token, head).

A model whose config has layer_types (sliding_attention, full_attention) and
sliding_window is hybrid: its KV cache groups are the ones vLLM's planner forms
(get_kv_cache_groups), each layer writes through its group's block table, and a
sliding-window group's blocks behind the window are vLLM's null block.
"""
import contextlib
import multiprocessing
import os
import sys
from dataclasses import dataclass
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local config dir; never ask the Hub
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # fake_model is beside us

import torch  # noqa: E402

from vllm.config import (  # noqa: E402
    CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig, SchedulerConfig,
    VllmConfig, set_current_vllm_config)
from vllm.distributed import parallel_state  # noqa: E402
from vllm.distributed.kv_transfer import kv_transfer_state  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole  # noqa: E402
from vllm.forward_context import get_forward_context, set_forward_context  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.attention.backend import AttentionMetadata  # noqa: E402
from vllm.v1.attention.backends.utils import (  # noqa: E402
    get_supported_kv_cache_layouts, resolve_kv_cache_layout)
from vllm.v1.core.kv_cache_planning import (  # noqa: E402
    get_kv_cache_config_from_groups, get_kv_cache_groups)
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    generate_scheduler_kv_cache_config, get_request_block_hasher, init_none_hash,
    resolve_cache_hit_alignment_tokens, resolve_kv_cache_block_sizes)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm.v1.worker.utils import allocate_kv_cache  # noqa: E402

from vllm.platforms import current_platform  # noqa: E402

# vLLM here is a CUDA build with no GPU: its platform is UnspecifiedPlatform, which refuses
# the hybrid allocator. The harness stands in for a GPU (or CPU) engine, whose platform
# supports it; the connector's own answer (SupportsHMA) still decides.
if not current_platform.support_hybrid_kv_cache():
    type(current_platform).support_hybrid_kv_cache = classmethod(lambda cls: True)

from fake_model import (  # noqa: E402,F401 (re-exported for tests)
    LAYER_NAME, VOCAB_SIZE, RequestRecord, expected_outputs, kv_value, next_token,
    write_model_dir)


@dataclass
class FakeAttnMetadata(AttentionMetadata):
    """The one metadata object every layer gets this step (a single KV cache group);
    the fields a connector may read off FlashAttentionMetadata, on the CPU."""
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    query_start_loc: torch.Tensor  # int32 [num_reqs + 1]
    seq_lens: torch.Tensor         # int32 [num_reqs]
    block_table: torch.Tensor      # int32 [num_reqs, max_blocks]
    slot_mapping: torch.Tensor     # int64 [num_tokens]: block_id * block_size + offset


class _AttentionStandIn:
    """Stands in for a layer's Attention module in static_forward_context, where
    connectors that walk forward_context.no_compile_layers (ExampleConnector) look for
    .kv_cache, as bind_kv_cache leaves it on the real module, and KvpoolConnector for the
    layer's backend: FlashAttention's, whose K and V the fake forward writes."""

    def __init__(self, kv_cache):
        self.kv_cache = kv_cache

    @staticmethod
    def get_attn_backend():
        from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

        return FlashAttentionBackend


class Engine:
    """One vLLM engine: add_request, step / run_until_done (-> records: RequestRecord
    per request), kv(layer) for a registered KV tensor, read_kv / request_kv /
    expected_kv to compare KV, close (or use as a context manager).

    tp_size > 1: tensor parallelism, the scheduler here and one worker process per rank
    (an Engine with tp_rank set: the rank's slice of the KV heads, its own worker-side
    connector), driven step by step as vLLM's executor does, their outputs merged by
    vLLM's KVOutputAggregator; rank(r) asks rank r for its KV."""

    def __init__(self, model_dir, block_size=16, num_gpu_blocks=64, kv_transfer_config=None,
                 dtype="bfloat16", max_num_batched_tokens=2048, max_num_seqs=16,
                 max_model_len=2048, kv_layout=None, log_stats=False, tp_size=1,
                 tp_rank=None, async_scheduling=False):
        """kv_layout: a KVCacheLayout name (LBNHC, LBHNC, ...) to force, as a user's
        VLLM_KV_CACHE_LAYOUT would; None resolves it as EngineCore does for
        FlashAttention (honouring the connector's get_required_kvcache_layout).
        async_scheduling: vLLM's AsyncScheduler, each step scheduled before the previous
        one's output is taken (as EngineCore's batch queue of two does)."""
        self._args = dict(model_dir=model_dir, block_size=block_size,
                          num_gpu_blocks=num_gpu_blocks, kv_transfer_config=kv_transfer_config,
                          dtype=dtype, max_num_batched_tokens=max_num_batched_tokens,
                          max_num_seqs=max_num_seqs, max_model_len=max_model_len,
                          kv_layout=kv_layout)
        self.tp_size, self.tp_rank, self.ranks = tp_size, tp_rank, []
        self.async_scheduling, self._in_flight = async_scheduling, None
        model_config = ModelConfig(model=model_dir, skip_tokenizer_init=True, dtype=dtype,
                                   max_model_len=max_model_len)
        scheduler_config = SchedulerConfig(
            max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
            max_model_len=max_model_len, is_encoder_decoder=False,
            async_scheduling=async_scheduling)
        cache_config = CacheConfig(block_size=block_size, enable_prefix_caching=True,
                                   num_gpu_blocks_override=num_gpu_blocks)
        self.vllm_config = VllmConfig(
            model_config=model_config, cache_config=cache_config,
            scheduler_config=scheduler_config, device_config=DeviceConfig(device="cpu"),
            kv_transfer_config=(KVTransferConfig(**kv_transfer_config)
                                if kv_transfer_config is not None else None))
        self.block_size = block_size
        self.num_layers = model_config.get_num_layers(self.vllm_config.parallel_config)
        self.num_kv_heads = model_config.get_total_num_kv_heads()
        # The KV heads this process's KV holds: a rank's slice, or all of them.
        per = self.num_kv_heads // tp_size if tp_rank is not None else self.num_kv_heads
        self.heads = slice((tp_rank or 0) * per, ((tp_rank or 0) + 1) * per)
        self.head_size = model_config.get_head_size()
        self.dtype = model_config.dtype
        self.layer_names = [LAYER_NAME.format(i) for i in range(self.num_layers)]
        hf = model_config.hf_text_config
        self.layer_types = getattr(hf, "layer_types", None) or \
            ["full_attention"] * self.num_layers
        self.sliding_window = getattr(hf, "sliding_window", None)
        self.records: dict[str, RequestRecord] = {}
        self._tables: dict[str, list[int]] = {}  # runner-side block tables
        self.kv_connector_outputs: list[KVConnectorOutput] = []  # the non-empty ones
        self.num_steps = 0
        with set_current_vllm_config(self.vllm_config):
            self._init_kv_cache_config(kv_layout)
            if tp_rank is not None:
                # vLLM's view from this rank: the parallel config and the rank's number.
                self.vllm_config.parallel_config.tensor_parallel_size = tp_size
                parallel_state.get_tensor_model_parallel_rank = lambda: tp_rank
                self._init_worker()
                return
            if tp_size > 1:
                self._start_ranks()
            else:
                self._init_worker()
            self._init_scheduler(log_stats)

    # -- set-up, in EngineCore's order -------------------------------------------------
    def _init_kv_cache_config(self, kv_layout):
        register_all_kvcache_specs(self.vllm_config)
        cache_config = self.vllm_config.cache_config
        shape = dict(block_size=self.block_size,
                     num_kv_heads=self.heads.stop - self.heads.start,
                     head_size=self.head_size, dtype=self.dtype)
        specs = {name: (SlidingWindowSpec(sliding_window=self.sliding_window, **shape)
                        if kind == "sliding_attention" else FullAttentionSpec(**shape))
                 for name, kind in zip(self.layer_names, self.layer_types)}
        if kv_layout is not None:
            cache_config.kv_cache_layout = kv_layout  # a pre-set layout wins resolution
        try:  # FlashAttention declares no layouts, so this is vLLM's default order
            from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
            supported = get_supported_kv_cache_layouts([FlashAttentionBackend])
        except Exception:
            supported = get_supported_kv_cache_layouts([])
        self.kv_layout = resolve_kv_cache_layout(
            self.vllm_config, [[layout.name for layout in supported]], list(specs.values()))
        # The groups vLLM forms (one for a uniform model; for a hybrid one, per kind, cut to
        # equal layer counts); vLLM's planner places the layers (strides) for the layout.
        groups = get_kv_cache_groups(self.vllm_config, dict(specs))
        self.layer_group = {name: g for g, group in enumerate(groups)
                            for name in group.layer_names}
        num_blocks = cache_config.num_gpu_blocks_override
        widest = max(len(g.layer_names) for g in groups)
        page = next(iter(specs.values())).page_size_bytes
        config = get_kv_cache_config_from_groups(self.vllm_config, groups,
                                                 page * widest * num_blocks)
        assert config.num_blocks == num_blocks, (config.num_blocks, num_blocks)
        config.kv_cache_layout = cache_config.kv_cache_layout
        cache_config.num_gpu_blocks = config.num_blocks
        sched_bs, hash_bs = resolve_kv_cache_block_sizes(config, self.vllm_config)
        config.hash_block_size = hash_bs
        config.cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(
            config, self.vllm_config, sched_bs, hash_bs)
        self.kv_cache_config = config  # the worker's
        self.scheduler_block_size, self.hash_block_size = sched_bs, hash_bs

    def _init_worker(self):
        # What GPUModelRunner.initialize_kv_cache_tensors hands register_kv_caches.
        self.kv_caches = allocate_kv_cache(self.kv_cache_config, torch.device("cpu"),
                                           self.kv_layout)
        d = self.head_size
        # [num_blocks, block_size, num_kv_heads, head_size] views of K and V, for writing.
        self._k = [self.kv_caches[n].transpose(1, 2)[..., :d] for n in self.layer_names]
        self._v = [self.kv_caches[n].transpose(1, 2)[..., d:] for n in self.layer_names]
        static = self.vllm_config.compilation_config.static_forward_context
        for name in self.layer_names:
            static[name] = _AttentionStandIn(self.kv_caches[name])
        self.worker_connector = None
        if self.vllm_config.kv_transfer_config is not None:
            # As ensure_kv_transfer_initialized does in the worker, but not left in the
            # process-wide slot, so two engines can live in one test (see _as_worker).
            self.worker_connector = KVConnectorFactory.create_connector(
                config=self.vllm_config, role=KVConnectorRole.WORKER,
                kv_cache_config=self.kv_cache_config)
            self.worker_connector.register_kv_caches(self.kv_caches)

    def _start_ranks(self):
        """A worker process per rank, each an Engine(tp_rank=r) answering _rank_main's ops."""
        self.worker_connector = None
        self.kv_caches = {}
        ctx = multiprocessing.get_context("spawn")
        for rank in range(self.tp_size):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=_rank_main, args=(theirs, self._args, rank,
                                                        self.tp_size), daemon=True)
            proc.start()
            self.ranks.append((proc, ours))
        for _, pipe in self.ranks:
            assert pipe.recv() == "ready"
        self._aggregator = KVOutputAggregator(expected_finished_count=self.tp_size)

    def rank(self, r, op, *args):
        """Runs op (a method of the rank's Engine) in rank r's process; its result."""
        pipe = self.ranks[r][1]
        pipe.send((op, args))
        ok, value = pipe.recv()
        if not ok:
            raise RuntimeError(f"rank {r}: {op}: {value}")
        return value

    def _init_scheduler(self, log_stats):
        # The scheduler's config is a copy, as generate_scheduler_kv_cache_config makes;
        # the Scheduler creates the SCHEDULER-role connector through the factory itself.
        self.scheduler = (AsyncScheduler if self.async_scheduling else Scheduler)(
            vllm_config=self.vllm_config,
            kv_cache_config=generate_scheduler_kv_cache_config([self.kv_cache_config]),
            structured_output_manager=StructuredOutputManager(self.vllm_config),
            block_size=self.scheduler_block_size, hash_block_size=self.hash_block_size,
            log_stats=log_stats)
        self.scheduler_connector = self.scheduler.get_kv_connector()
        hash_fn = get_hash_fn_by_name(self.vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self._block_hasher = get_request_block_hasher(
            self.hash_block_size, hash_fn, self.vllm_config.num_hash_lookahead_tokens)

    @contextlib.contextmanager
    def _as_worker(self):
        """The worker's process-wide state for a step: its vLLM config and its connector
        in the slot get_kv_transfer_group() reads (put back afterwards)."""
        saved = kv_transfer_state._KV_CONNECTOR_AGENT
        kv_transfer_state._KV_CONNECTOR_AGENT = self.worker_connector
        try:
            with set_current_vllm_config(self.vllm_config):
                yield
        finally:
            kv_transfer_state._KV_CONNECTOR_AGENT = saved

    # -- requests --------------------------------------------------------------------
    def add_request(self, req_id, prompt_token_ids, max_tokens, kv_transfer_params=None,
                    **request_kw):
        """request_kw: more of vllm's Request's arguments (cache_salt, lora_request)."""
        extra = {"kv_transfer_params": kv_transfer_params} if kv_transfer_params else None
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, extra_args=extra)
        request = Request(request_id=req_id, prompt_token_ids=list(prompt_token_ids),
                          sampling_params=params, pooling_params=None,
                          block_hasher=self._block_hasher, **request_kw)
        self.records[req_id] = RequestRecord(req_id, list(prompt_token_ids), max_tokens)
        with set_current_vllm_config(self.vllm_config):
            self.scheduler.add_request(request)
        return request

    def run_until_done(self, max_steps=1000):
        """Step until the scheduler holds nothing (finished requests whose blocks wait
        on a connector included); a stuck engine raises instead of spinning."""
        start = self.num_steps
        while self.scheduler.has_requests() or self._in_flight or not all(
                r.finished for r in self.records.values()):
            if self.num_steps - start >= max_steps:
                pending = [r for r, rec in self.records.items() if not rec.finished]
                raise RuntimeError(f"not done after {max_steps} steps; unfinished {pending}")
            self.step()
        return self.records

    # -- one engine step ---------------------------------------------------------------
    def step(self):
        """One EngineCore.step: schedule, run the worker, update_from_output. With async
        scheduling: schedule the next step, take the output of the one in flight, then
        run the next (its tokens are known by then: what the runner's own sampled tokens
        would give it)."""
        if self.async_scheduling:
            return self._step_async()
        with set_current_vllm_config(self.vllm_config):
            so = self.scheduler.schedule()
            output = self._execute(so, self._update_states(so))
            outputs = self.scheduler.update_from_output(so, output)
        for eco in outputs.values():
            for out in eco.outputs:
                self._record_output(out)
        self.num_steps += 1
        return so, outputs

    def _step_async(self):
        with set_current_vllm_config(self.vllm_config):
            so = self.scheduler.schedule() if self.scheduler.has_requests() else None
            outputs = {}
            if self._in_flight is not None:
                outputs = self.scheduler.update_from_output(*self._in_flight)
                self._in_flight = None
            if so is not None:
                self._in_flight = (so, self._execute(so, self._update_states(so)))
        for eco in outputs.values():
            for out in eco.outputs:
                self._record_output(out)
        self.num_steps += 1
        return so, outputs

    def _update_states(self, so):
        """The runner's bookkeeping before a forward: block tables from the scheduler
        output (V2 runner semantics), block zeroing and copy-on-write copies. Returns
        the batch: (req_id, first position, token ids) per scheduled request."""
        for req_id in so.finished_req_ids | (so.preempted_req_ids or set()):
            self._tables.pop(req_id, None)
        starts = {}
        for new in so.scheduled_new_reqs:
            self._tables[new.req_id] = [list(ids) for ids in new.block_ids]
            starts[new.req_id] = new.num_computed_tokens
        cached = so.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:  # a resumed table comes whole
                self._tables[req_id] = [list(ids) for ids in new_ids]
            elif new_ids is not None:
                for table, more in zip(self._tables[req_id], new_ids):
                    table.extend(more)
            starts[req_id] = cached.num_computed_tokens[i]
        self._zero_and_copy(so)
        batch = []
        for req_id, n in so.num_scheduled_tokens.items():
            tables = self._tables[req_id]
            # The tables we built as a runner must be the ones the manager holds, but for
            # the blocks a sliding window left behind (vLLM nulls them, telling no runner).
            held = [list(ids) for ids in self.scheduler.kv_cache_manager.get_block_ids(req_id)]
            for table, ids in zip(tables, held):
                assert len(table) == len(ids) and all(
                    h in (t, 0) for t, h in zip(table, ids)), \
                    f"{req_id}: runner table {table} != manager's {ids}"
            start = starts[req_id]
            tokens = list(self.scheduler.requests[req_id].all_token_ids)[start:start + n]
            batch.append((req_id, start, tokens))
            self.records[req_id].tables = held
            self.records[req_id].block_ids = held[self.layer_group[self.layer_names[0]]]
        return batch

    def _zero_and_copy(self, so):
        """The blocks the scheduler output says to zero, and its copy-on-write copies."""
        for block in so.new_block_ids_to_zero or ():
            for cache in self.kv_caches.values():
                cache[block] = 0
        for copy in so.kv_cache_block_copies or ():
            for cache in self.kv_caches.values():
                cache[copy.dst_block_id] = cache[copy.src_block_id]

    def _attn_metadata(self, batch, group=0):
        lens = [len(tokens) for _, _, tokens in batch]
        qsl = torch.tensor([0] + lens, dtype=torch.int32).cumsum(0, dtype=torch.int32)
        seq = torch.tensor([s + n for (_, s, _), n in zip(batch, lens)], dtype=torch.int32)
        width = max(len(self._tables[r][group]) for r, _, _ in batch)
        table = torch.zeros(len(batch), width, dtype=torch.int32)
        for i, (r, _, _) in enumerate(batch):
            table[i, :len(self._tables[r][group])] = torch.tensor(self._tables[r][group])
        pos = torch.cat([torch.arange(s, s + n) for (_, s, _), n in zip(batch, lens)])
        row = torch.repeat_interleave(torch.arange(len(batch)), torch.tensor(lens))
        slots = table[row, pos // self.block_size].long() * self.block_size + (
            pos % self.block_size)
        return FakeAttnMetadata(sum(lens), max(lens), int(seq.max()), qsl, seq, table, slots)

    def _execute(self, so, batch):
        """The workers' part of a step (here, or in each rank's process), then what the
        sampler returns."""
        if self.ranks:
            lite = SimpleNamespace(
                kv_connector_metadata=so.kv_connector_metadata,
                has_sync_kv_loads=so.has_sync_kv_loads, finished_req_ids=so.finished_req_ids,
                preempted_req_ids=so.preempted_req_ids,
                new_block_ids_to_zero=so.new_block_ids_to_zero,
                kv_cache_block_copies=so.kv_cache_block_copies)
            tables = {r: self._tables[r] for r, _, _ in batch}
            outs = [ModelRunnerOutput.with_kv_conn_output_only(
                self.rank(r, "rank_step", lite, batch, tables)) for r in range(self.tp_size)]
            kv_out = self._aggregator.aggregate(outs).kv_connector_output
        else:
            kv_out = self._worker_step(so, batch)
        for req_id, start, toks in batch:
            self.records[req_id].computed_positions.extend(range(start, start + len(toks)))
        if not batch:
            return ModelRunnerOutput.with_kv_conn_output_only(kv_out)
        sampled = []
        for req_id, start, tokens in batch:
            done_prompt = start + len(tokens) >= self.scheduler.requests[req_id].num_tokens
            sampled.append([next_token(tokens[-1])] if done_prompt else [])
        req_ids = [r for r, _, _ in batch]
        return ModelRunnerOutput(req_ids=req_ids,
                                 req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                 sampled_token_ids=sampled, kv_connector_output=kv_out)

    def fail_saves(self):
        """This engine's worker-side copies into the pool fail from now on (a test's fault)."""
        worker = self.worker_connector._worker
        copy = worker._copy

        def failing(c, to_pool):
            if to_pool:
                raise OSError("injected: the copy into the pool failed")
            return copy(c, to_pool)
        worker._copy = failing

    def rank_step(self, so, batch, tables):
        """A rank's part of a step: the runner's tables as the scheduler's process sent
        them, zeroing and copies, then the forward and the connector's calls."""
        for req_id in so.finished_req_ids | (so.preempted_req_ids or set()):
            self._tables.pop(req_id, None)
        self._tables.update(tables)
        for req_id, table in tables.items():
            self.records.setdefault(req_id, RequestRecord(req_id, [], 0)).tables = table
        self._zero_and_copy(so)
        out = self._worker_step(so, batch)
        return out if out is not None and not out.is_empty() else None

    def _worker_step(self, so, batch):
        """Mirrors V2's execute_model + sample_tokens around ActiveKVConnector:
        pre_forward (handle_preemptions, bind metadata, sync loads start before the
        forward), forward, finish_forward, then post_forward (async loads start,
        wait_for_save, transfer results, load errors, stats, clear metadata)."""
        conn = self.worker_connector
        num_groups = len(set(self.layer_group.values()))
        groups = [self._attn_metadata(batch, g) for g in range(num_groups)] if batch else None
        attn = groups[0] if batch else None
        # What V2's eager path passes start_load_kv besides the context; none when idle.
        load_kwargs = dict(
            scheduler_output=so, request_ids=[r for r, _, _ in batch],
            request_state_indices=torch.arange(len(batch), dtype=torch.int32),
            num_tokens=attn.num_actual_tokens) if batch else {}
        pending = None
        with self._as_worker():
            per_layer = ({n: groups[self.layer_group[n]] for n in self.layer_names}
                         if attn is not None else None)
            slot_map = ({n: groups[self.layer_group[n]].slot_mapping for n in self.layer_names}
                        if attn is not None else None)
            with set_forward_context(per_layer, self.vllm_config,
                                     num_tokens=attn.num_actual_tokens if attn else None,
                                     slot_mapping=slot_map):
                if conn is not None:
                    conn.handle_preemptions(so.kv_connector_metadata)
                    conn.bind_connector_metadata(so.kv_connector_metadata)
                    pending = load_kwargs
                    if so.has_sync_kv_loads:
                        conn.start_load_kv(get_forward_context(), **pending)
                        pending = None
                if batch:
                    self._forward(batch, groups, conn)
            if conn is not None:
                conn.finish_forward()
            return self._post_forward(so, pending) if conn is not None else None

    def _forward(self, batch, groups, conn):
        """Layer by layer, as maybe_transfer_kv_layer wraps an attention layer: wait for
        the layer's load, write this step's K and V through the layer's group's table,
        offer the layer to save_kv_layer."""
        tokens = torch.tensor([t for _, _, toks in batch for t in toks])
        pos = torch.cat([torch.arange(s, s + len(toks)) for _, s, toks in batch])
        hooks = conn is not None and conn.has_connector_metadata()
        for layer, name in enumerate(self.layer_names):
            attn = groups[self.layer_group[name]]
            blocks = attn.slot_mapping // self.block_size
            offsets = attn.slot_mapping % self.block_size
            if hooks:
                conn.wait_for_layer_load(name)
            k, v = kv_value(tokens, pos, layer, self.num_kv_heads, self.head_size)
            self._k[layer][blocks, offsets] = k[:, self.heads].to(self.dtype)
            self._v[layer][blocks, offsets] = v[:, self.heads].to(self.dtype)
            if hooks:
                conn.save_kv_layer(name, self.kv_caches[name], attn)

    def _post_forward(self, so, pending):
        conn = self.worker_connector
        if pending is not None:  # async loads start after the forward, with no metadata
            with set_forward_context(None, self.vllm_config):
                conn.start_load_kv(get_forward_context(), **pending)
        conn.wait_for_save()
        results = conn.get_transfer_results(so.finished_req_ids)
        out = KVConnectorOutput(
            finished_sending=results.finished_sending or None,
            finished_recving=results.finished_recving or None,
            failed_recving=results.failed_recving,
            invalid_block_ids=conn.get_block_ids_with_load_errors(),
            kv_connector_stats=conn.get_kv_connector_stats(),
            kv_cache_events=conn.get_kv_connector_kv_cache_events(),
            kv_connector_worker_meta=conn.build_connector_worker_meta())
        conn.clear_connector_metadata()
        if not out.is_empty():
            self.kv_connector_outputs.append(out)
        return out

    def _record_output(self, out):
        rec = self.records[out.request_id]
        rec.output_tokens.extend(out.new_token_ids)
        if out.prefill_stats is not None:  # on a request's first output only
            rec.num_external_tokens = out.prefill_stats.num_external_cached_tokens
            rec.num_local_cached_tokens = out.prefill_stats.num_local_cached_tokens
        if out.finish_reason is not None:
            rec.finish_reason = str(out.finish_reason)
            rec.kv_transfer_params = out.kv_transfer_params
            rec.error = out.error

    # -- reading KV ----------------------------------------------------------------------
    def kv(self, layer):
        """The tensor registered for a layer (an index or a layer name)."""
        return self.kv_caches[layer if isinstance(layer, str) else self.layer_names[layer]]

    def read_kv(self, block_ids, positions, layer):
        """K and V (float32, [len(positions), num_kv_heads, head_size]) at the positions
        of a sequence whose block table is block_ids."""
        pos = torch.as_tensor(list(positions), dtype=torch.int64)
        blocks = torch.as_tensor(block_ids, dtype=torch.int64)[pos // self.block_size]
        layer = layer if isinstance(layer, int) else self.layer_names.index(layer)
        offsets = pos % self.block_size
        return (self._k[layer][blocks, offsets].float(),
                self._v[layer][blocks, offsets].float())

    def table(self, req_id, layer):
        """A request's block table (at its last forward) of the layer's group."""
        name = layer if isinstance(layer, str) else self.layer_names[layer]
        return self.records[req_id].tables[self.layer_group[name]]

    def kept_positions(self, req_id, layer):
        """The positions whose KV the request still holds in a layer: all tokens but the
        last sampled one, less those a sliding window left behind (null blocks)."""
        rec = self.records[req_id]
        table = self.table(req_id, layer)
        return [p for p in range(len(rec.prompt_token_ids) + len(rec.output_tokens) - 1)
                if table[p // self.block_size]]

    def request_kv(self, req_id, layer, positions=None):
        """read_kv over a request's last block table; by default kept_positions. Freed
        blocks can be reused by later requests, so read before running others."""
        if positions is None:
            positions = self.kept_positions(req_id, layer)
        return self.read_kv(self.table(req_id, layer), positions, layer)

    def expected_kv(self, req_id, layer, positions=None):
        """What the fake model writes at those positions of a request."""
        rec = self.records[req_id]
        tokens = rec.prompt_token_ids + rec.output_tokens
        positions = list(self.kept_positions(req_id, layer) if positions is None
                         else positions)
        k, v = kv_value([tokens[p] for p in positions], positions, layer,
                        self.num_kv_heads, self.head_size)
        return k[:, self.heads], v[:, self.heads]

    def close(self):
        if self.tp_rank is None:
            self.scheduler.shutdown()
        for r, (proc, pipe) in enumerate(self.ranks):
            pipe.send(("close", ()))
            proc.join(timeout=30)
        if self.worker_connector is not None:
            self.worker_connector.shutdown()
        static = self.vllm_config.compilation_config.static_forward_context
        for name in self.layer_names:
            static.pop(name, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _rank_main(pipe, args, rank, size):
    """A tensor-parallel rank's process: Engine(tp_rank=rank) running the ops its
    scheduler's process sends ((method name, args) -> (ok, result)) until "close"."""
    engine = Engine(**args, tp_size=size, tp_rank=rank)
    pipe.send("ready")
    while True:
        op, op_args = pipe.recv()
        if op == "close":
            engine.close()
            return
        try:
            pipe.send((True, getattr(engine, op)(*op_args)))
        except Exception as e:  # the test sees it, named
            pipe.send((False, repr(e)))
