# SPDX-License-Identifier: MIT
"""The connector's worker copies (kvpool.vllm.worker, no vLLM needed) in every KV layout of vLLM's
attention backends kvpool knows, on a host pool with CPU tensors or a cuda pool with a GPU's:
a save puts vLLM's blocks in the pool's, a load brings them back into other vLLM blocks,
byte for byte; --rate then measures the copies' GB/s each way. pytest runs it on the CPU
(test_copies.py); tests/gpu/run.sh on a GPU:
    python3 tests/vllm/copies_check.py --socket SOCK --device cuda --backend cuda --rate"""
import argparse
import os
import statistics
import sys
import time
from types import SimpleNamespace

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# After PYTHONPATH: the GPU machine's built kvpool (.device/python) comes first.
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(HERE)), "lib", "python"))

import kvpool  # noqa: E402
from kvpool.vllm.kv_layout import CPU_K_TRANSPOSED, SIDE_BY_SIDE  # noqa: E402
from kvpool.vllm.worker import WorkerSide  # noqa: E402

BS, HEADS, D, LAYERS, BLOCKS = 16, 2, 16, 2, 12


def layouts():
    """layout -> (allocate [vLLM blocks] tensor, (K, V) views [blocks][bs][heads][D] of it),
    the views written here from each backend's description, not by kv_layout."""
    size = (BLOCKS, HEADS, BS, 2 * D)
    return {
        # FlashAttention, FlashInfer, Triton, Flex: K then V per head and token.
        SIDE_BY_SIDE: (size, lambda t: (t[..., :D].transpose(1, 2),
                                        t[..., D:].transpose(1, 2))),
        # CPU_ATTN's vec kernels: per block and head, K as [D][bs], then V as [bs][D].
        CPU_K_TRANSPOSED: (size, lambda t: (
            t.view(BLOCKS, HEADS, 2 * BS * D)[..., :BS * D].view(BLOCKS, HEADS, D, BS)
            .permute(0, 3, 1, 2),
            t.view(BLOCKS, HEADS, 2 * BS * D)[..., BS * D:].view(BLOCKS, HEADS, BS, D)
            .transpose(1, 2))),
    }


def check(socket, device, backend, layout):
    pool = f"copies-{layout}"
    with kvpool.Client(socket, admin=True) as admin:
        admin.create_pool(pool, 16, BS, [("full", 0)], kv_heads=HEADS, head_dim=D,
                          layers_per_group=LAYERS, dtype="bf16", namespace="copies",
                          backend=backend, layout="layer", owned=True)
        size, views = layouts()[layout]
        caches = {}
        for layer in range(LAYERS):
            # Distinct finite bf16 values everywhere: a misplaced element shows.
            t = torch.arange(torch.Size(size).numel(), dtype=torch.float32)
            t = ((t * (layer + 3)) % 1021 - 510).to(torch.bfloat16).reshape(size).to(device)
            caches[f"model.layers.{layer}.self_attn.attn"] = t
        before = {name: t.clone() for name, t in caches.items()}
        w = WorkerSide(None, None, {"socket": socket, "pool": pool, "namespace": "copies"},
                       layout=layout)
        w.register(caches)
        copy = SimpleNamespace
        # Save vLLM blocks 3, 7, 1 into pool blocks 5, 2, 9; load them into vLLM 0, 10, 4.
        w.save(copy(step=1, saves=[copy(req_id="s", vllm_blocks=[[3, 7, 1]],
                                        pool_blocks=[[5, 2, 9]])], loads=[], load_errors=[]))
        assert w.take_answer() == (1, set())
        w.load(copy(step=2, loads=[copy(req_id="l", pool_blocks=[[5, 2, 9]],
                                        vllm_blocks=[[0, 10, 4]])],
                    saves=[], load_errors=[11], failed_loads=[]))
        assert w.finished({"s"}) == (None, {"l"})
        assert w.take_load_errors() == {11}
        for name, t in caches.items():
            k, v = views(t)
            k0, v0 = views(before[name])
            for src, dst in ((3, 0), (7, 10), (1, 4)):
                assert torch.equal(k[dst], k0[src]) and torch.equal(v[dst], v0[src]), name
            for untouched in (1, 2, 3, 5, 6, 7, 8, 9, 11):
                assert torch.equal(t[untouched], before[name][untouched]), name
        # Stretches of consecutive blocks (a slice copy each): vLLM 4-6 and 8-9 saved into
        # pool 10-14, loaded back into vLLM 0-4.
        mid = {name: t.clone() for name, t in caches.items()}
        w.save(copy(step=4, saves=[copy(req_id="s2", vllm_blocks=[[4, 5, 6, 8, 9]],
                                        pool_blocks=[[10, 11, 12, 13, 14]])], loads=[],
                    load_errors=[]))
        assert w.take_answer() == (4, set())
        w.load(copy(step=5, loads=[copy(req_id="l2", pool_blocks=[[10, 11, 12, 13, 14]],
                                        vllm_blocks=[[0, 1, 2, 3, 4]])],
                    saves=[], load_errors=[], failed_loads=[]))
        for name, t in caches.items():
            k, v = views(t)
            k0, v0 = views(mid[name])
            for src, dst in ((4, 0), (5, 1), (6, 2), (8, 3), (9, 4)):
                assert torch.equal(k[dst], k0[src]) and torch.equal(v[dst], v0[src]), name
            for untouched in range(5, BLOCKS):
                assert torch.equal(t[untouched], mid[name][untouched]), name
        # Block ids of another daemon run (planned before a restart): no copy is made, the
        # load is reported failed and vLLM's blocks are as they were.
        after = {name: t.clone() for name, t in caches.items()}
        w.load(copy(step=3, boot_id=w.link.client.boot_id ^ 1,
                    loads=[copy(req_id="x", pool_blocks=[[5]], vllm_blocks=[[6]])],
                    saves=[], load_errors=[], failed_loads=[]))
        assert w.take_load_errors() == {6}
        assert all(torch.equal(t, after[name]) for name, t in caches.items())
        w.close()


def check_tp(socket, device, backend):
    """Tensor parallelism, 2 ranks of 1 head each: each saves its head of vLLM blocks 3 and 7
    into pool blocks 5 and 2; a worker of 1 rank, both heads, loads them into its blocks 0
    and 1: head h is rank h's, byte for byte."""
    pool = "copies-tp"
    with kvpool.Client(socket, admin=True) as admin:
        admin.create_pool(pool, 16, BS, [("full", 0)], kv_heads=HEADS, head_dim=D,
                          layers_per_group=LAYERS, dtype="bf16", namespace="copies",
                          backend=backend, layout="layer", owned=True)
        extra = {"socket": socket, "pool": pool, "namespace": "copies"}
        copy = SimpleNamespace
        ranks = []
        for rank in range(HEADS):
            caches = {}
            for layer in range(LAYERS):
                t = torch.arange(BLOCKS * BS * 2 * D, dtype=torch.float32) * (rank + 2)
                t = (t % 997 - 498 + 1000 * layer).to(torch.bfloat16)
                caches[f"model.layers.{layer}.self_attn.attn"] = \
                    t.reshape(BLOCKS, 1, BS, 2 * D).to(device)
            w = WorkerSide(None, None, extra, rank=(rank, HEADS), layout=SIDE_BY_SIDE)
            w.register(caches)
            w.save(copy(step=1, saves=[copy(req_id="s", vllm_blocks=[[3, 7]],
                                            pool_blocks=[[5, 2]])], loads=[], load_errors=[]))
            assert w.take_answer() == (1, set())
            ranks.append(caches)
            w.close()
        whole = {name: torch.zeros(BLOCKS, HEADS, BS, 2 * D, dtype=torch.bfloat16,
                                   device=device) for name in ranks[0]}
        w = WorkerSide(None, None, extra, rank=(0, 1), layout=SIDE_BY_SIDE)
        w.register(whole)
        w.load(copy(step=2, loads=[copy(req_id="l", pool_blocks=[[5, 2]],
                                        vllm_blocks=[[0, 1]])], saves=[], load_errors=[]))
        w.close()
        for name, t in whole.items():
            for h in range(HEADS):
                for src, dst in ((3, 0), (7, 1)):
                    assert torch.equal(t[dst, h], ranks[h][name][src, 0]), (name, h)


def rate(socket, device, backend, blocks=256, reps=5):
    """GB/s each way: a save (vLLM's blocks into the pool's) and a load (back), of blocks
    blocks of 16 tokens x 8 heads x 128, 4 layers, bf16 (256 KiB a block with K and V), in
    one stretch of consecutive ids (slice copies) and scattered (index_copy_); the median of
    reps. Returns {(way, order): GB/s}."""
    heads, d, layers = 8, 128, 4
    pool = "copies-rate"
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    out = {}
    with kvpool.Client(socket, admin=True) as admin:
        admin.create_pool(pool, blocks + 1, BS, [("full", 0)], kv_heads=heads, head_dim=d,
                          layers_per_group=layers, dtype="bf16", namespace="copies",
                          backend=backend, layout="layer", owned=True)
        caches = {f"model.layers.{layer}.self_attn.attn":
                  torch.ones(blocks, heads, BS, 2 * d, dtype=torch.bfloat16, device=device)
                  for layer in range(layers)}
        w = WorkerSide(None, None, {"socket": socket, "pool": pool, "namespace": "copies"},
                       layout=SIDE_BY_SIDE)
        w.register(caches)
        ours = list(range(blocks))
        scattered = ours[::2] + ours[1::2]  # no two neighbours in a row: index_copy_
        copy = SimpleNamespace
        for order, vllm_ids in (("consecutive", ours), ("scattered", scattered)):
            pool_ids = [[b + 1 for b in ours]]
            for way in ("save", "load"):
                times = []
                for rep in range(reps):
                    c = copy(req_id=f"r{rep}", vllm_blocks=[vllm_ids], pool_blocks=pool_ids)
                    sync()
                    t0 = time.perf_counter()
                    if way == "save":
                        w.save(copy(step=rep, saves=[c], loads=[], load_errors=[]))
                        assert w.take_answer() == (rep, set())
                    else:
                        w.load(copy(step=rep, loads=[c], saves=[], load_errors=[],
                                    failed_loads=[]))
                        assert w.finished(set()) == (None, {f"r{rep}"})
                    sync()
                    times.append(time.perf_counter() - t0)
                out[way, order] = blocks * w.group_bytes[0] / statistics.median(times) / 1e9
        w.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backend", default="host")
    ap.add_argument("--rate", action="store_true",
                    help="then the copies' GB/s each way (64 MiB, consecutive and scattered "
                    "blocks)")
    args = ap.parse_args()
    for name in layouts():
        check(args.socket, args.device, args.backend, name)
        print(f"copies {name} on {args.device} ({args.backend} pool): ok")
    check_tp(args.socket, args.device, args.backend)
    print(f"copies of 2 tensor-parallel ranks on {args.device} ({args.backend} pool): ok")
    if args.rate:
        r = rate(args.socket, args.device, args.backend)
        for order in ("consecutive", "scattered"):
            print(f"copies rate on {args.device} ({args.backend} pool), {order} blocks: "
                  f"save (into the pool) {r['save', order]:.2f} GB/s, "
                  f"load (out of it) {r['load', order]:.2f} GB/s")


if __name__ == "__main__":
    main()
