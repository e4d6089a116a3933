# SPDX-License-Identifier: MIT
"""The vLLM connector's figures, on vLLM's own Scheduler (tests/vllm/harness.py) on the CPU:

  step  vLLM's scheduler step (schedule() + update_from_output()) for 64 running requests in
        decode, no hits, with and without KvpoolConnector (target: the connector adds at most
        10%); the fake model's forward is outside the timing.
  ttft  time to first token of engine B's request on a 4096-token prompt engine A served,
        with the forward modelled as 0.1 ms per token computed (a stated assumption): the
        prefill the load saves against the load's cost.
  wake  what one kvpool request costs after an idle gap (the daemon asleep): a NOP timed
        after 0, 0.2, 1 and 5 ms of busy-waiting, the bound of the connector's step.

Run in the project's venv: .venv/bin/python bench/vllm_step.py [step] [ttft] [wake]"""
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "vllm"), str(ROOT / "tests" / "python"),
                str(ROOT / "lib" / "python")]

import harness  # noqa: E402
from daemon_proc import Daemon  # noqa: E402

FORWARD_S_PER_TOKEN = 1e-4
POOL = ("[pool.bench]\nblocks = 1024\nblock_size = 16\ngroups = full\nkv_heads = 2\n"
        "head_dim = 16\ndtype = bf16\nlayers_per_group = 2\nlayout = layer\n"
        "namespace = bench\nmax_len = 8192\n")


def connector(socket):
    return {"kv_connector": "KvpoolConnector", "kv_connector_module_path": "kvpool.vllm",
            "kv_role": "kv_both", "kv_connector_extra_config": {
                "socket": socket, "pool": "bench", "namespace": "bench"}}


def timed_step(engine):
    """One step; returns (the scheduler's seconds, the worker's seconds)."""
    with harness.set_current_vllm_config(engine.vllm_config):
        t0 = time.perf_counter()
        so = engine.scheduler.schedule()
        t1 = time.perf_counter()
        output = engine._execute(so, engine._update_states(so))
        t2 = time.perf_counter()
        outputs = engine.scheduler.update_from_output(so, output)
        t3 = time.perf_counter()
    for eco in outputs.values():
        for out in eco.outputs:
            engine._record_output(out)
    engine.num_steps += 1
    return (t1 - t0) + (t3 - t2), t2 - t1


def decode_steps(model_dir, kv_transfer_config, requests=64, steps=200):
    """Seconds of each of steps decode steps of requests running requests. Their prompts'
    lengths are staggered (32 to 47 tokens), so that about 4 of them complete a block, which
    the connector saves, in every step."""
    with harness.Engine(model_dir, num_gpu_blocks=2048, max_num_seqs=requests,
                        kv_transfer_config=kv_transfer_config) as e:
        for i in range(requests):
            e.add_request(f"r{i}", [(i * 131 + 7 * j) % 1000 for j in range(32 + i % 16)],
                          max_tokens=steps + 10)
        while not all(len(r.output_tokens) > 0 for r in e.records.values()):
            timed_step(e)  # the prefills
        return [timed_step(e)[0] for _ in range(steps)]


def bench_step(model_dir, socket):
    rows = []
    for rnd in range(3):  # alternating, so that the machine's drift hits both
        base, conn = (decode_steps(model_dir, cfg) for cfg in (None, connector(socket)))
        rows.append([(statistics.median(x), statistics.mean(x)) for x in (base, conn)])
        (bmed, bmean), (cmed, cmean) = rows[-1]
        print(f"step round {rnd}: median without {bmed * 1e6:.0f} us, with {cmed * 1e6:.0f} us "
              f"({(cmed / bmed - 1) * 100:+.1f}%); mean without {bmean * 1e6:.0f} us, with "
              f"{cmean * 1e6:.0f} us ({(cmean / bmean - 1) * 100:+.1f}%)")
    for i, what in ((0, "median"), (1, "mean")):
        base = statistics.median(r[0][i] for r in rows)
        conn = statistics.median(r[1][i] for r in rows)
        print(f"step: 64 requests in decode, {what} step of 200, median of 3 rounds: without "
              f"{base * 1e6:.0f} us, with KvpoolConnector {conn * 1e6:.0f} us "
              f"({(conn / base - 1) * 100:+.1f}%; target +10% at most)")


WORKER_CALLS = ("bind_connector_metadata", "start_load_kv", "wait_for_layer_load",
                "save_kv_layer", "wait_for_save", "get_finished", "get_transfer_results",
                "get_block_ids_with_load_errors", "build_connector_worker_meta",
                "get_kv_connector_stats", "clear_connector_metadata")


def worker_connector_time(engine):
    """A list whose one element adds up the time of the worker connector's calls."""
    spent = [0.0]
    conn = engine.worker_connector
    for name in WORKER_CALLS if conn is not None else ():
        call = getattr(conn, name)

        def timed(*args, _call=call, **kwargs):
            t = time.perf_counter()
            try:
                return _call(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - t
        setattr(conn, name, timed)
    return spent


def first_token(engine, req_id, prompt):
    """Seconds to the first token: the scheduler's steps and the worker connector's calls
    (the loads' copies) as measured, the forward as modelled (0.1 ms a token computed)."""
    copies = worker_connector_time(engine)
    engine.add_request(req_id, prompt, max_tokens=1)
    rec, sched = engine.records[req_id], 0.0
    while not rec.output_tokens:
        sched += timed_step(engine)[0]
    return sched + copies[0] + len(rec.computed_positions) * FORWARD_S_PER_TOKEN, rec


def bench_ttft(model_dir, socket):
    prompt = [(7 * j + 3) % 1000 for j in range(4096)]
    with harness.Engine(model_dir, num_gpu_blocks=1024, max_num_batched_tokens=8192,
                        max_model_len=8192, kv_transfer_config=connector(socket)) as a:
        a.add_request("a", prompt, max_tokens=1)
        a.run_until_done()
    ttft = {}
    for name, cfg in (("without", None), ("with KvpoolConnector", connector(socket))):
        with harness.Engine(model_dir, num_gpu_blocks=1024, max_num_batched_tokens=8192,
                            max_model_len=8192, kv_transfer_config=cfg) as b:
            spent, rec = first_token(b, "b", prompt + [1])
        ttft[name] = (spent, rec.num_external_tokens or 0)
        print(f"ttft {name}: {spent * 1e3:.1f} ms ({rec.num_external_tokens or 0} tokens "
              f"loaded, {len(rec.computed_positions)} computed at 0.1 ms each)")
    (without, _), (with_, loaded) = ttft["without"], ttft["with KvpoolConnector"]
    modelled = (len(prompt) + 1 - loaded) * FORWARD_S_PER_TOKEN
    print(f"ttft: a token loaded costs {(with_ - modelled) / loaded * 1e6:.1f} us against "
          f"{FORWARD_S_PER_TOKEN * 1e6:.0f} us to compute it; first token "
          f"{without / with_:.1f}x sooner")


def bench_wake(socket):
    import kvpool
    with kvpool.Client(socket, pool="bench", namespace="bench") as c:
        for gap in (0, 0.0002, 0.001, 0.005):
            spent = []
            for _ in range(200):
                until = time.perf_counter() + gap
                while time.perf_counter() < until:
                    pass
                t = time.perf_counter()
                c.nop()
                spent.append(time.perf_counter() - t)
            spent.sort()
            print(f"wake: a NOP after {gap * 1e3:.1f} ms idle: median {spent[100] * 1e6:.1f} us, "
                  f"p90 {spent[180] * 1e6:.1f} us")


def main(argv):
    which = argv or ["step", "ttft", "wake"]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = harness.write_model_dir(os.path.join(tmp, "model"), max_positions=8192)
        d = Daemon(Path(tmp), POOL + "\n[namespace.bench]\nuids = 0\n",
                   os.environ.get("KVPOOLD", str(ROOT / "build" / "bin" / "kvpoold")))
        try:
            if "step" in which:
                bench_step(model_dir, d.socket)
            if "ttft" in which:
                bench_ttft(model_dir, d.socket)
            if "wake" in which:
                bench_wake(d.socket)
        finally:
            d.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
