# SPDX-License-Identifier: MIT
"""A KV events subscriber as a router runs one (vLLM's wire format: ZMQ SUB, frames topic,
8-byte big-endian sequence number, msgpack payload; replay over a DEALER), and the chained
block hashes a subscriber expects, computed here as the daemon's core does."""
import struct
import time

import zmq
from zmq.utils.monitor import recv_monitor_message

try:  # Debian's python3-msgpack; in vLLM's environment, its msgspec
    import msgpack

    def unpack(payload):
        return msgpack.unpackb(payload, strict_map_key=False)
except ImportError:
    import msgspec

    unpack = msgspec.msgpack.decode

M64 = (1 << 64) - 1
SALT_SEED = 0x6B76706F6F6C5341  # block_hash.c: a salt's hash is seeded apart from blocks


def chain(tokens, block_size, namespace=b"", salt=None):
    """The low 64 bits of each full block's chained hash, as kvpool's core makes them: the root
    is the salt's hash (the namespace field, 32 bytes, a flag byte, the user's salt), each block
    XXH3-128 of its parent's 16 bytes and its tokens."""
    import xxhash

    root = xxhash.xxh3_128_intdigest(namespace.ljust(32, b"\0") + bytes([1 if salt else 0]) +
                                     (salt or b""), seed=SALT_SEED)
    lo, hi = root & M64, root >> 64
    out = []
    for i in range(len(tokens) // block_size):
        block = tokens[i * block_size:(i + 1) * block_size]
        h = xxhash.xxh3_128_intdigest(struct.pack("<QQ", lo, hi) +
                                      struct.pack("<%dI" % block_size, *block))
        lo, hi = h & M64, h >> 64
        out.append(lo)
    return out


class Subscriber:
    """A SUB socket on endpoint, connected (its handshake done) when the constructor returns."""

    def __init__(self, endpoint, ctx=None):
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        mon = self.sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self.sock.connect(endpoint)
        assert mon.poll(5000), "no handshake with " + endpoint
        recv_monitor_message(mon)
        self.sock.disable_monitor()
        mon.close()
        # The subscription goes out after the handshake: give it the publisher's I/O thread.
        time.sleep(0.1)

    def raw(self, quiet=0.4, limit=10.0):
        """Every message until none came for `quiet` s: [(topic, seq, payload bytes)]."""
        out, deadline = [], time.monotonic() + limit
        while time.monotonic() < deadline and self.sock.poll(int(quiet * 1000)):
            topic, seq, payload = self.sock.recv_multipart()
            out.append((topic.decode(), int.from_bytes(seq, "big"), payload))
        return out

    def batches(self, quiet=0.4, limit=10.0):
        """Every message until none came for `quiet` s: [(topic, seq, [ts, events, dp_rank])]."""
        out = []
        for topic, seq, payload in self.raw(quiet, limit):
            out.append((topic, seq, unpack(payload)))
        return out

    def events(self, quiet=0.4):
        return [e for _, _, b in self.batches(quiet) for e in b[1]]

    def close(self):
        self.sock.close(linger=0)


def replay(endpoint, start, ctx=None, timeout=5.0):
    """What a replay from sequence number `start` returns: [(seq, payload bytes)], the end marker
    ((-1, b"")) last."""
    ctx = ctx or zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(endpoint)
    sock.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    try:
        while True:
            assert sock.poll(int(timeout * 1000)), "replay: no answer"
            frames = sock.recv_multipart()
            assert frames[0] == b"" and len(frames) == 3, frames
            seq = int.from_bytes(frames[1], "big", signed=True)
            out.append((seq, frames[2]))
            if seq == -1:
                return out
    finally:
        sock.close(linger=0)


def stored(hashes, parent, tokens, block_size, medium="CPU", group=0, kind="full_attention",
           window=None):
    """BlockStored as vLLM's map form has it."""
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
            "token_ids": tokens, "block_size": block_size, "lora_id": None, "medium": medium,
            "lora_name": None, "extra_keys": None, "group_idx": group,
            "kv_cache_spec_kind": kind, "kv_cache_spec_sliding_window": window}


def removed(hashes, medium="CPU", group=0):
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium, "group_idx": group}


CLEARED = {"type": "AllBlocksCleared"}
