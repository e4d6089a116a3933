# SPDX-License-Identifier: MIT
"""One running vLLM engine (vLLM's CPU build, a real model, real forward passes) in a process
of its own, driven by the tests over a pipe: python engine_proc.py RESULT_FD CONFIG_JSON, then
one JSON command a line on stdin, one JSON answer a line on RESULT_FD (vLLM's own output, its
log included, goes to stdout and stderr).

CONFIG: model (a directory), block_size, connector (kv_transfer_config or null), num_blocks
(num_gpu_blocks_override or null), max_model_len, log_stats (vLLM's stats logging and
Prometheus metrics on).
Commands: generate (prompts, max_tokens) -> per prompt its tokens, the chosen tokens'
logprobs and num_cached_tokens, with the connector's copies made meanwhile (pool block ->
digest of vLLM's block, every layer, raw bytes: what a save read and a load wrote), its
counts and vLLM's preemptions; reset (vLLM's prefix cache dropped, so the next hit is the
pool's); metrics (the vllm:kvpool_ lines of vLLM's Prometheus registry); quit (vLLM's
engine shut down, the connector's with it)."""
import hashlib
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class Copies:
    """What the connector's worker copied, seen from vLLM's side of each copy."""

    def __init__(self):
        self.saved, self.loaded = {}, {}

    def install(self):
        import torch
        from kvpool.vllm.worker import WorkerSide, layer_groups

        copy, record = WorkerSide._copy, self

        def recording_copy(worker, c, to_pool):
            copied = copy(worker, c, to_pool)
            seen = record.saved if to_pool else record.loaded
            groups = layer_groups(worker.kv_cache_config, worker.caches)
            for g, (pools, vllms) in enumerate(zip(c.pool_blocks, c.vllm_blocks)):
                for p, v in zip(pools, vllms):
                    h = hashlib.sha256()
                    for name in groups[g]:
                        block = worker.caches[name][v].contiguous().view(-1)
                        h.update(block.view(torch.uint8).numpy().tobytes())
                    seen[f"{g}:{p}"] = h.hexdigest()
            return copied

        WorkerSide._copy = recording_copy

    def take(self):
        out = {"saved": self.saved, "loaded": self.loaded}
        self.saved, self.loaded = {}, {}
        return out


def margin(logprobs):
    """How far the chosen (greedy: the first) token's logprob is above the runner-up's."""
    best = sorted((x.logprob for x in logprobs.values()), reverse=True)
    return best[0] - best[1] if len(best) > 1 else float("inf")


def connector_of(llm):
    """The scheduler side's and the worker's KvpoolConnector (one process: UniProcExecutor
    and the engine core in-process)."""
    core = llm.llm_engine.engine_core.engine_core
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    return core.scheduler.get_kv_connector(), get_kv_transfer_group()


def main(result_fd, config):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    copies = Copies()
    copies.install()
    out = os.fdopen(result_fd, "w", buffering=1)
    kw = {}
    if config.get("connector"):
        kw["kv_transfer_config"] = config["connector"]
    if config.get("num_blocks"):
        kw["num_gpu_blocks_override"] = config["num_blocks"]
    if config.get("log_stats"):
        kw["disable_log_stats"] = False  # "KV Transfer metrics" lines and Prometheus's
    llm = LLM(model=config["model"], skip_tokenizer_init=True, dtype="bfloat16",
              block_size=config["block_size"], max_model_len=config["max_model_len"],
              enable_prefix_caching=True, enforce_eager=True, seed=0, max_num_seqs=8,
              max_num_batched_tokens=config["max_model_len"], **kw)
    sched, worker = connector_of(llm) if config.get("connector") else (None, None)
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    preempt, preempted = scheduler._preempt_request, []

    def counting_preempt(request, *args, **kw):
        preempted.append(request.request_id)
        return preempt(request, *args, **kw)

    scheduler._preempt_request = counting_preempt
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["op"] == "generate":
                # Two logprobs a position: the chosen token's, and how near the runner-up came.
                sp = SamplingParams(temperature=0, max_tokens=cmd["max_tokens"], logprobs=2,
                                    ignore_eos=True, detokenize=False)
                outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in cmd["prompts"]],
                                    sp, use_tqdm=False)
                answer = {"outputs": [dict(
                    tokens=list(o.outputs[0].token_ids),
                    logprobs=[lp[t].logprob for lp, t in zip(o.outputs[0].logprobs,
                                                              o.outputs[0].token_ids)],
                    margins=[margin(lp) for lp in o.outputs[0].logprobs],
                    num_cached_tokens=o.num_cached_tokens) for o in outs]}
                answer.update(copies.take())
                answer["preemptions"], preempted[:] = len(preempted), []
                if sched is not None:
                    answer["counts"] = dict(sched._sched.counts)
                    answer["worker_counts"] = dict(worker._worker.counts)
            elif cmd["op"] == "metrics":
                from prometheus_client import REGISTRY, generate_latest

                answer = {"metrics": [line for line in generate_latest(REGISTRY).decode()
                                      .splitlines() if line.startswith("vllm:kvpool_")]}
            elif cmd["op"] == "reset":
                answer = {"reset": llm.reset_prefix_cache()}
            elif cmd["op"] == "quit":
                llm.llm_engine.engine_core.shutdown()
                out.write(json.dumps({"quit": True}) + "\n")
                return
            else:
                answer = {"error": f"unknown op {cmd['op']}"}
        except Exception:
            answer = {"error": traceback.format_exc()}
        out.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    sys.path[:0] = [os.path.join(ROOT, "lib", "python")]
    main(int(sys.argv[1]), json.loads(sys.argv[2]))
