# SPDX-License-Identifier: MIT
"""A KV-aware router's index, kept from KV events alone, as llm-d's and Dynamo's are: run in a
network namespace of its own (test_kv_events_netns.py), subscribed to every machine's PUB
socket. Machines are named on the command line, NAME=PUB_ENDPOINT,REPLAY_ENDPOINT.

A block is known by its parent's hash and its tokens (what BlockStored says): a request's hit
on a machine is its longest run of blocks from the start whose hashes that machine has
announced and not withdrawn, capped as vLLM caps a hit (at least the last token is computed).
Liveness is per (hash, medium): a BlockRemoved withdraws its medium's announcement alone, and
a block is hittable while any medium has it (a machine's "REMOTE": what it knows its cluster
holds). kvpool announces a block the pool and its local tier both hold once, and withdraws it
in the medium it announced it in (docs/events.md).
A gap in a machine's sequence numbers is filled by a replay before what follows is applied.

Commands on stdin, one JSON a line; answers on stdout, likewise:
  {"wait": {"NAME": SEQ, ...}}   -> {"ok": true} once every batch up to SEQ is applied
  {"predict": [TOKENS], "block_size": N} -> {"NAME": HIT_TOKENS, ...}
"""
import json
import sys
import threading

import zmq

from kv_events_sub import unpack


def medium_of(event):
    """Where an announcement is held: its medium ("CPU", "GPU", "DISK", "REMOTE"), as llm-d's
    index keys a pod's block (a withdrawal names the medium its announcement named)."""
    return event.get("medium")


class Machine:
    def __init__(self, name, pub, replay, ctx):
        self.name, self.replay_endpoint, self.ctx = name, replay, ctx
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(pub)
        self.known = {}   # (parent hash or None, tokens) -> hash
        self.live = {}    # hash -> the media it is live in
        self.last = -1    # the last sequence number applied
        self.replays = 0

    def apply(self, batch):
        for e in batch[1]:
            kind = e["type"]
            if kind == "BlockStored":
                bs, parent = e["block_size"], e["parent_block_hash"]
                for i, h in enumerate(e["block_hashes"]):
                    self.known[(parent, tuple(e["token_ids"][i * bs:(i + 1) * bs]))] = h
                    self.live.setdefault(h, set()).add(medium_of(e))
                    parent = h
            elif kind == "BlockRemoved":
                for h in e["block_hashes"]:
                    media = self.live.get(h, set())
                    media.discard(medium_of(e))
                    if not media:
                        self.live.pop(h, None)
            elif kind == "AllBlocksCleared":
                self.live.clear()

    def fill(self, upto):
        """Batches last+1 .. upto-1 from the machine's replay (they were not received)."""
        sock = self.ctx.socket(zmq.DEALER)
        sock.connect(self.replay_endpoint)
        sock.send_multipart([b"", (self.last + 1).to_bytes(8, "big")])
        self.replays += 1
        while True:
            _, seq, payload = sock.recv_multipart()
            seq = int.from_bytes(seq, "big", signed=True)
            if seq == -1:
                break
            if self.last < seq < upto:
                self.apply(unpack(payload))
                self.last = seq
        sock.close(linger=0)

    def receive(self, lock, changed):
        while True:
            _, seq, payload = self.sock.recv_multipart()
            seq = int.from_bytes(seq, "big")
            with lock:
                if seq > self.last + 1:
                    self.fill(seq)
                if seq == self.last + 1:
                    self.apply(unpack(payload))
                    self.last = seq
                changed.notify_all()

    def hit(self, tokens, bs):
        parent, n = None, 0
        for i in range(len(tokens) // bs):
            h = self.known.get((parent, tuple(tokens[i * bs:(i + 1) * bs])))
            if h is None or h not in self.live:
                break
            parent, n = h, n + 1
        return min(n, (len(tokens) - 1) // bs) * bs


def main():
    ctx = zmq.Context()
    machines = {}
    for arg in sys.argv[1:]:
        name, endpoints = arg.split("=", 1)
        pub, replay = endpoints.split(",")
        machines[name] = Machine(name, pub, replay, ctx)
    lock = threading.Lock()
    changed = threading.Condition(lock)
    for m in machines.values():
        threading.Thread(target=m.receive, args=(lock, changed), daemon=True).start()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        with lock:
            if "wait" in cmd:
                def caught_up():
                    return all(machines[n].last >= s for n, s in cmd["wait"].items())

                # Nothing more may come to show a batch missed at the end: replay it.
                if not changed.wait_for(caught_up, timeout=1):
                    for n, s in cmd["wait"].items():
                        if machines[n].last < s:
                            machines[n].fill(s + 1)
                out = {"ok": caught_up(), "replays": sum(m.replays for m in machines.values())}
            else:
                out = {n: m.hit(cmd["predict"], cmd["block_size"]) for n, m in machines.items()}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
