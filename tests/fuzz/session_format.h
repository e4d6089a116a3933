/* SPDX-License-Identifier: MIT */
/*
 * The byte format fuzz_session interprets, shared with the seed generator
 * (gen_session_seeds.c) so that the hand-made seeds and the harness cannot
 * drift apart. Every field is optional: input that runs out reads as zeros.
 *
 *   input   := prelude setup action*
 *   prelude := 1 byte: FZ_PRE_*
 *   setup   := 3 bytes (FZ_S0_*, FZ_S1_*, FZ_S2_*) [+ 5 bytes: which, u32 value
 *              when FZ_S1_MUTATE is set]
 *   action  := 1 byte: (FZ_A_* | client << 4) then the action's own bytes
 *
 * Integers are little-endian. Arena offsets are given in units of 4 bytes
 * (u16 * 4 covers a 256 KiB arena).
 */
#ifndef KVPOOL_FUZZ_SESSION_FORMAT_H
#define KVPOOL_FUZZ_SESSION_FORMAT_H

/* prelude: the per-input pools' shapes, and how the session ends */
#define FZ_PRE_KV_SHAPE(b) ((b) & 7u)           /* pool "kv": one of 8 shapes */
#define FZ_PRE_DTYPE(b) (((b) >> 3) & 3u)       /* its dtype (3: f32 again) */
#define FZ_PRE_PLAIN_SHAPE(b) (((b) >> 5) & 3u) /* pool "plain" (no KV): one of 4 */
#define FZ_PRE_DRAIN_FIRST 0x80u                /* drain the jobs, then hang up */

/* setup byte 0: ring and arena sizes */
#define FZ_S0_SQ_LOG2(b) ((b) & 7u)       /* sq_entries = 1 << n */
#define FZ_S0_CQ_MODE(b) (((b) >> 3) & 3u) /* 0: 0 (2 * sq), 1: sq, 2: 4 * sq, 3: not a power of 2 */
#define FZ_S0_ARENA(b) (((b) >> 5) & 7u)   /* index into the arena sizes of fuzz_session.c */
/* setup byte 1: pool, namespace, features */
#define FZ_S1_POOL(b) ((b) & 3u)         /* "", "kv", "plain", "nosuch" */
#define FZ_S1_NS(b) (((b) >> 2) & 3u)    /* "", "team", "open", "solo" */
#define FZ_S1_SPIN 0x10u
#define FZ_S1_ADMIN 0x20u
#define FZ_S1_STATS 0x40u
#define FZ_S1_MUTATE 0x80u               /* corrupt one field (5 more bytes) */
/* setup byte 2: who connects, and how the setup goes */
#define FZ_S2_UID(b) ((b) & 3u)          /* the daemon's euid, 1000, 1001, 65534 */
#define FZ_S2_HUP 0x04u                  /* the hang-up comes with the setup message */
#define FZ_S2_FAIL_WATCH 0x08u           /* the event loop cannot watch the socket */
#define FZ_S2_FAIL_BELL 0x10u            /* ... or the doorbell */
#define FZ_S2_TRACE 0x20u                /* client 0's only: probes traced for the input */

enum fz_action {
	FZ_A_SQE_RAW,     /* 64 bytes: an SQE as is, at the SQ tail; the tail moves */
	FZ_A_SQE,         /* FZ_SQE_BYTES: u8 index in FZ_OPCODES, u8 handle, u8 FZ_F_*,
			   * u16 len, addr (x4), out_addr (x4), out_len (x4), arg1, arg2 */
	FZ_A_SQ_TAIL,     /* u8 mode, u32 v: mode & 1 ? tail = v : tail += (int8_t)v */
	FZ_A_CQ_HEAD,     /* u8 mode, u32 v: 0 reap all, 1 head = v, 2 head += (int8_t)v */
	FZ_A_ARENA_BYTES, /* u16 off, u8 len, len bytes */
	FZ_A_ARENA_FILL,  /* u16 off, u16 len (x4), u8 v: memset v, or floats when v >= 0x80 */
	FZ_A_TOKENS,      /* u16 off, u8 n, u8 base, u8 step: n u32 tokens base + i * step */
	FZ_A_ATTEND,      /* struct kvp_attend and its seqs, built from compact fields */
	FZ_A_POOL_PARAMS, /* struct kvp_pool_params, built from compact fields */
	FZ_A_RUN,         /* u8 budget: kvpd_ring_process, as the event loop calls it */
	FZ_A_POLL,        /* u8 bits: complete finished jobs, help, pending, sleep flags */
	FZ_A_DRAIN,       /* wait for every job, complete them */
	FZ_A_TICK,        /* housekeeping: fragmentation stats, pools reaped */
	FZ_A_CONNECT,     /* setup (3 or 8 bytes): a new session on this client slot */
	FZ_A_HANGUP,      /* the client goes (its jobs may still run) */
	FZ_A_NOP,
	FZ_A_COUNT,
};
#define FZ_ACTION(op, client) ((unsigned char)((op) | (client) << 4))

/* FZ_A_SQE: its bytes, and its flag bits. */
#define FZ_SQE_BYTES 15
#define FZ_F_OPFLAG 0x01u   /* op_flags = 1 (the opcode's known flag) */
#define FZ_F_BADFLAG 0x02u  /* op_flags |= 0x80 (unknown) */
#define FZ_F_RESV 0x04u     /* a reserved field non-zero */
#define FZ_F_LEN_BIG 0x08u  /* len <<= 12 */
#define FZ_F_ARG1_BIG 0x10u /* arg1 <<= 16 */
#define FZ_F_ADDR_WRAP 0x20u /* addr = -addr: offsets that wrap */
#define FZ_F_OUT_ALL 0x40u  /* out_len: the arena from out_addr on */
#define FZ_F_AUTO 0x80u     /* addr and len: the last arena object written */

/* FZ_A_SQE's opcode byte indexes this table (mod its size). */
#define FZ_OPCODES                                                                   \
	0 /* NOP */, 1 /* SEQ_OPEN */, 2 /* SEQ_CLOSE */, 3 /* APPEND */, 4 /* LOOKUP */, \
	5 /* ALLOC */, 6 /* COMMIT */, 7 /* FREE */, 8 /* GET_TABLE */, 9 /* POOL_STATS */, \
	10 /* STATS */, 11 /* ATTACH */, 12 /* WRITE_KV */, 13 /* READ_KV */,             \
	14 /* ATTEND */, 64 /* POOL_CREATE */, 65 /* POOL_DESTROY */, 66 /* EVICT */,      \
	67 /* RESET */, 68 /* DUMP_FREEQ */, 69 /* CHECK */, 15, 70, 255

#endif
