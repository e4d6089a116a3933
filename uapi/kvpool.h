/* SPDX-License-Identifier: MIT */
/*
 * kvpool ABI: what a client process and kvpoold exchange.
 *
 * A client connects to the daemon's Unix socket (SOCK_SEQPACKET), sends one
 * struct kvp_setup and receives one struct kvp_setup_reply carrying, by
 * SCM_RIGHTS, a sealed memfd holding its submission ring (SQ), completion ring
 * (CQ) and data arena, the SQ doorbell (an eventfd the client writes to wake
 * the daemon, and the daemon never reads) and, when agreed, the stats page.
 * The socket stays open and silent: its hang-up ends the session. The daemon
 * wakes a client with FUTEX_WAKE on the CQ tail word, where the client sleeps
 * in FUTEX_WAIT (a shared futex: no FUTEX_PRIVATE_FLAG). Nothing the daemon
 * does on the client's behalf can be stalled, or made dearer, by what the
 * client does to the descriptors it holds.
 *
 * Rings follow io_uring's protocol: the producer writes entries, then
 * publishes its tail with a release store; the consumer reads the tail with an
 * acquire load, consumes, then publishes its head with a release store. Offsets
 * of every ring field come back in the setup reply, so the layout can change
 * without breaking clients that use them. See docs/protocol.md.
 *
 * Every reserved field must be zero, else the request fails with -EINVAL.
 * Reserved fields of what the daemon writes (replies, completions, stats) are
 * written as zero. All integers are host-endian; "arena offset" means bytes
 * from the start of the data arena. The layout has no implicit padding: the
 * _Static_asserts at the end pin every size and offset.
 */
#ifndef _UAPI_KVPOOL_H
#define _UAPI_KVPOOL_H

#include <linux/types.h>

#define KVP_MAGIC 0x6b76706cu /* "kvpl" */
/*
 * 2: the CQ wake-up is a futex on the CQ tail (no CQ eventfd is passed), the
 * daemon never reads the doorbell, and the socket carries nothing after the
 * reply. A client of another version is refused with -EPROTO, and the reply's
 * abi_version says which one the daemon speaks.
 */
#define KVP_ABI_VERSION 2
#define KVP_DEFAULT_SOCKET "/run/kvpool/kvpool.sock"

#define KVP_NAME_MAX 32     /* pool and namespace names, NUL included */
#define KVP_MAX_ENTRIES 4096 /* ring entries, a power of two */
#define KVP_MAX_ARENA (1ull << 30)
#define KVP_MAX_GROUPS 16

/* Feature bits, agreed at setup: reply.features = request.features & supported. */
#define KVP_FEAT_SPIN_WAKEUP (1ull << 0) /* NEED_WAKEUP flags on both rings */
#define KVP_FEAT_ADMIN (1ull << 1)       /* admin opcodes (granted to root / the daemon's uid) */
#define KVP_FEAT_STATS_PAGE (1ull << 2)  /* a 4th descriptor: the read-only stats page */
#define KVP_FEAT_POOL_MAP (1ull << 3)    /* POOL_MAP: clients map the KV memory of a pool
					  * restricted to their namespace */
/*
 * This connection observes (kvctl): it is not listed among clients (STATS, the
 * stats page's rows, a pool's clients, clients_connected/disconnected), only
 * counted in the stats' monitors. It attaches to no pool (a setup naming one,
 * and ATTACH to one, get -EINVAL), and still takes a connection of its uid's
 * (and namespace's) max_clients: watching cannot exhaust the daemon.
 */
#define KVP_FEAT_MONITOR (1ull << 4)
#define KVP_FEAT_POOL_KEYS (1ull << 5)   /* POOL_CREATE v3: v2 and a text of pool keys */
#define KVP_FEAT_TIER_REMOTE (1ull << 6) /* cluster tiers (tier_remote): the stats page's
					  * remote_off rows */
#define KVP_FEATURES_SUPPORTED (KVP_FEAT_SPIN_WAKEUP | KVP_FEAT_ADMIN | KVP_FEAT_STATS_PAGE | \
				KVP_FEAT_POOL_MAP | KVP_FEAT_MONITOR | KVP_FEAT_POOL_KEYS | \
				KVP_FEAT_TIER_REMOTE)

/*
 * Client -> daemon, the first message on the socket, exactly this size. A bad
 * magic or version gets -EPROTO, any other bad field -EINVAL (in reply.result).
 * Names (pool, namespace_) are "" or 1..31 printable non-blank ASCII bytes,
 * zero-padded to KVP_NAME_MAX.
 */
struct kvp_setup {
	__u32 magic;           /* KVP_MAGIC */
	__u32 abi_version;     /* KVP_ABI_VERSION */
	__u32 sq_entries;      /* power of two, 1..KVP_MAX_ENTRIES */
	__u32 cq_entries;      /* power of two, sq_entries..2 * KVP_MAX_ENTRIES;
				* 0 for 2 * sq_entries */
	__u64 arena_bytes;     /* data arena size, rounded up to pages; <= KVP_MAX_ARENA */
	__u64 features;        /* KVP_FEAT_* wanted; bits not granted are dropped, not refused */
	char pool[KVP_NAME_MAX];      /* pool to attach to (-ENODEV if unknown); "" for none
				       * (admin, stats) */
	char namespace_[KVP_NAME_MAX]; /* cache namespace; "" is the shared default; -EPERM
					* unless granted to the peer's uid */
	__u64 resv[4];         /* must be zero (else -EINVAL) */
};

/* Daemon -> client, in the reply: byte offsets in the memfd of the SQ's parts. */
struct kvp_sq_offsets {
	__u32 head;    /* __u32, written by the daemon */
	__u32 tail;    /* __u32, written by the client */
	__u32 flags;   /* __u32, KVP_SQ_*, written by the daemon */
	__u32 entries; /* __u32, ring size, written by the daemon at setup */
	__u32 sqes;    /* struct kvp_sqe[entries], written by the client */
	__u32 resv[3]; /* zero */
};

/* Daemon -> client, in the reply: byte offsets in the memfd of the CQ's parts. */
struct kvp_cq_offsets {
	__u32 head;    /* __u32, written by the client */
	__u32 tail;    /* __u32, written by the daemon */
	__u32 flags;   /* __u32, KVP_CQ_*, written by the client */
	__u32 entries; /* __u32, ring size, written by the daemon at setup */
	__u32 cqes;    /* struct kvp_cqe[entries], written by the daemon */
	__u32 resv[3]; /* zero */
};

/* SQ flags (daemon -> client). */
#define KVP_SQ_NEED_WAKEUP (1u << 0) /* the daemon sleeps: ring the SQ doorbell */
/* CQ flags (client -> daemon). */
#define KVP_CQ_NEED_WAKEUP (1u << 0) /* the client sleeps: FUTEX_WAKE the CQ tail */

/* Daemon -> client: the attached pool's parameters, as given to POOL_CREATE or the config. */
struct kvp_pool_info {
	__u32 num_blocks;     /* N, null block 0 included */
	__u32 block_size;     /* tokens per block */
	__u32 num_groups;     /* KV cache groups, 1..KVP_MAX_GROUPS */
	__u32 max_len;        /* longest sequence, tokens */
	__u8 group_kind[KVP_MAX_GROUPS];   /* KVP_KIND_*; the first num_groups entries count */
	__u32 group_param[KVP_MAX_GROUPS]; /* window W or chunk C, tokens; unused for FULL */
	__u32 kv_heads;       /* KV geometry; 0 when the pool holds no KV */
	__u32 head_dim;       /* elements per head row */
	__u32 dtype;          /* KVP_DTYPE_* of the KV (and of Q by default) */
	__u32 layers_per_group; /* layers stored per group */
};

/* KVP_OP_ATTACH's reply with the pool's generation: its kvp_pool_info, then a __u64. */
#define KVP_ATTACH_REPLY_BYTES (sizeof(struct kvp_pool_info) + 8)

/*
 * Daemon -> client, the reply to the setup. A refusal (result < 0) is followed
 * by a second message, the reason: NUL-terminated text of at most
 * KVP_REASON_MAX bytes; then the socket closes. After a setup that succeeded
 * the daemon sends nothing on the socket but POOL_MAP's messages.
 */
struct kvp_setup_reply {
	__s32 result;          /* 0, or -errno (no descriptors come then, a reason follows, and
				* the socket closes) */
	__u32 client_id;       /* this connection's id, as in STATS and the stats page */
	__u64 features;        /* agreed KVP_FEAT_* */
	__u64 mmap_bytes;      /* size of the memfd; map it all, shared */
	__u32 sq_entries;      /* SQ size, entries */
	__u32 cq_entries;      /* CQ size, entries (2 * sq_entries when asked for 0) */
	struct kvp_sq_offsets sq_off; /* where the SQ lives in the memfd */
	struct kvp_cq_offsets cq_off; /* where the CQ lives in the memfd */
	__u64 arena_off;       /* offset of the data arena in the memfd, page-aligned */
	__u64 arena_bytes;     /* arena size: the request rounded up to pages */
	struct kvp_pool_info pool; /* zero when attached to none */
	__u64 stats_bytes;     /* with KVP_FEAT_STATS_PAGE: size of the stats page; else 0 */
	__u32 abi_version;     /* KVP_ABI_VERSION of the daemon, set in refusals too (a daemon
				* of ABI 1 left it 0) */
	__u32 version;         /* kvpoold's version, KVP_VERSION_CODE(major, minor, patch), set in
				* refusals too (0 from a daemon before 0.2.0) */
	__u64 boot_id;         /* this run of the daemon: random at its start, never 0 (0 from an
				* older daemon): block ids and handles mean something only to
				* the daemon that gave them, and two clients tell whether theirs is
				* the same one by it */
	__u64 pool_generation; /* the attached pool's: random when the pool was built, never 0,
				* the same for as long as that pool is (a planned restart hands
				* it on), another once it is built again; 0 attached to none, or
				* from an older daemon */
};

/* A version as kvp_setup_reply.version carries it: 0.2.0 is 0x000200. */
#define KVP_VERSION_CODE(major, minor, patch) (((major) << 16) | ((minor) << 8) | (patch))

/* Descriptors passed with the reply, in this order (the stats page only when agreed). */
enum { KVP_FD_MEM, KVP_FD_DOORBELL, KVP_FD_STATS, KVP_NUM_FDS };

/*
 * The doorbell: write(2) an 8-byte 1 to the KVP_FD_DOORBELL eventfd. The daemon
 * watches it for writes and never reads it, so its counter only grows (a
 * client that saturates it has only silenced its own doorbell).
 */

/* LOOKUP's id for a hit position the pool's tier holds (ALLOC copies it up into a block). */
#define KVP_BLOCK_TIER 0xffffffffu
/*
 * LOOKUP's id for a hit position only the pool's cluster tier holds
 * (tier_remote; ALLOC reads it into a block). A LOOKUP that asked the
 * cluster completes after its round.
 */
#define KVP_BLOCK_REMOTE 0xfffffffeu

enum kvp_opcode {
	KVP_OP_NOP = 0,
	KVP_OP_SEQ_OPEN,      /* addr: tokens (__u32[len], len >= 1), then salt (arg2 bytes);
			       * arg1: prefix if KVP_OPEN_PREFIX. cqe.aux: the handle */
	KVP_OP_SEQ_CLOSE,     /* handle: free the blocks and forget the sequence */
	KVP_OP_APPEND_TOKENS, /* handle, addr: tokens (__u32[len]) */
	KVP_OP_LOOKUP,        /* handle; out (optional): struct kvp_block_lists, cqe.aux: its bytes.
			       * res: hit tokens, or -EOVERFLOW if out_len is short. A position
			       * the pool's tier holds is KVP_BLOCK_TIER in the lists, one only
			       * its cluster tier holds KVP_BLOCK_REMOTE */
	KVP_OP_ALLOC,         /* handle, len: new tokens, arg1: lookahead, KVP_ALLOC_USE_CACHE;
			       * out (optional): the new blocks as struct kvp_block_lists; out_len
			       * is 0 or >= its 68-byte head (else -EINVAL, nothing changes).
			       * res: 0 or -ENOSPC; cqe.aux: hit tokens */
	KVP_OP_COMMIT,        /* handle, len: computed tokens, a total (publishes, drops). With KV:
			       * -ENODATA unless every layer of every group is written up to len */
	KVP_OP_FREE,          /* handle: release the blocks, keep the sequence */
	KVP_OP_GET_TABLE,     /* handle; out: struct kvp_block_lists of the tables. res and
			       * cqe.aux: its bytes (-EOVERFLOW: aux is what out_len must be) */
	KVP_OP_POOL_STATS,    /* out: struct kvp_pool_stats of the attached pool */
	KVP_OP_STATS,         /* out: struct kvp_stats_header, pools, clients. res: bytes,
			       * cqe.aux: bytes needed (-EOVERFLOW when out_len is short) */
	KVP_OP_ATTACH,        /* addr: pool name (len bytes, no NUL; 0 detaches); out_addr: the
			       * pool's kvp_pool_info when out_len holds it, then its __u64
			       * generation (kvp_setup_reply.pool_generation) when out_len is
			       * KVP_ATTACH_REPLY_BYTES or more; cqe.aux: the bytes written;
			       * -EBUSY while a sequence is open */
	KVP_OP_WRITE_KV,      /* handle, arg1: first position, len: tokens, arg2: KVP_KV_SEL;
			       * addr: K then V, each [len][kv_heads][head_dim] in the pool dtype.
			       * Only positions >= computed (-EPERM) and < allocated slots (-EINVAL) */
	KVP_OP_READ_KV,       /* as WRITE_KV, out_addr: K then V. -ENODATA: a position not present */
	KVP_OP_ATTEND,        /* addr: struct kvp_attend (len bytes). -ENODATA: the mask needs a
			       * position that was dropped or never written. cqe.aux: on a
			       * cuda pool, its kernels' device time in ns; else 0 */
	KVP_OP_POOL_LAYOUT,   /* out: struct kvp_kv_layout, its layers, its pieces' sizes, of the
			       * attached pool. res and cqe.aux: its bytes (-EOVERFLOW: aux is
			       * what out_len must be); -EOPNOTSUPP for a pool without KV */
	KVP_OP_POOL_MAP,      /* KVP_FEAT_POOL_MAP: the attached pool's memory descriptors follow
			       * on the socket (SCM_RIGHTS, at most KVP_MAP_FDS_PER_MSG a message,
			       * in piece order). res: how many. -EPERM (reason in out) unless the
			       * pool is restricted to this client's namespace */
	/* Admin (KVP_FEAT_ADMIN): */
	KVP_OP_POOL_CREATE = 64, /* addr: struct kvp_pool_params, _v2 or _v3 and its keys (len: their
				  * size); KVP_POOL_OWNED */
	KVP_OP_POOL_DESTROY,  /* addr: pool name (len bytes); -EBUSY while in use by others */
	KVP_OP_EVICT,         /* addr: block ids (__u32[len], repeats allowed) of the attached pool.
			       * res: hashes removed */
	KVP_OP_RESET,         /* a pool's prefix cache forgotten (vLLM's reset_prefix_cache): addr
			       * a pool name (len bytes; len 0: the attached pool, -ENODEV
			       * without one); -EBUSY while any of its blocks is in use. Its
			       * tier keeps what it holds */
	KVP_OP_DUMP_FREEQ,    /* out: __u32 ids, head first. res: queue length */
	KVP_OP_CHECK,         /* attached pool's invariants: 0 or -EUCLEAN; out: reason text */
	KVP_OP_POOL_SYNC,     /* addr: pool name (len bytes; len 0: the attached pool, -ENODEV
			       * without one). Completes (res 0) once every copy into the pool's
			       * tier queued before it has finished; at once without a tier */
	KVP_OP_POOL_PURGE_REMOTE, /* addr: pool name (len bytes; len 0: the attached pool, -ENODEV
			       * without one). Deletes the pool's keys (its prefix and
			       * geometry) from its cluster tier, every master's (SCAN,
			       * UNLINK). res and aux: keys deleted (res at most INT32_MAX);
			       * -EOPNOTSUPP without a cluster
			       * tier, -EHOSTUNREACH when a master could not be reached (the
			       * others' keys deleted all the same) */
	KVP_OP_DAEMON_RESTART, /* addr: the binary's path (len bytes, no NUL; len 0: the one
			       * the daemon was started from); out: a refusal's reason. res
			       * 0: the daemon stops accepting and taking requests, finishes
			       * the ones it took, closes every connection and execs it with
			       * the cache handed over (docs/reliability.md); -ENOENT,
			       * -EACCES, -ENOEXEC: not a kvpoold that runs; -EALREADY */
	KVP_OP_LAST,
};

/*
 * What one request may name, and how much of it may be in flight. Beyond a
 * limit a request fails with its errno; the in-flight one is flow control.
 */
#define KVP_ATTEND_MAX_SEQS 4096        /* ATTEND entries (num_seqs): -E2BIG */
#define KVP_ATTEND_MAX_KEYS (1u << 22)  /* ATTEND key positions read, summed over its
					 * entries (each entry's counted once per
					 * position its queries read): -E2BIG */
#define KVP_ATTEND_MAX_QUERIES (1u << 16) /* ATTEND query positions (count), summed
					 * over its entries: -E2BIG */
#define KVP_ATTEND_MAX_Q_HEADS 256      /* ATTEND q_heads: -E2BIG */
#define KVP_MAX_DATA_INFLIGHT 64        /* WRITE_KV, READ_KV, ATTEND of one client on
					 * the workers at once; the next one waits in the
					 * SQ (with what follows it) until one completes */

/* WRITE_KV / READ_KV: sqe.arg2 names the group and the layer within it. */
#define KVP_KV_SEL(group, layer) ((__u32)(group) | (__u32)(layer) << 16)

/* sqe.op_flags */
#define KVP_OPEN_PREFIX (1u << 0)     /* SEQ_OPEN: arg1 is the R-SWA prefix length */
#define KVP_ALLOC_USE_CACHE (1u << 0) /* ALLOC: look the prefix cache up first */
/*
 * POOL_CREATE: the pool belongs to the creating connection; once that is
 * closed (or its process dies) the daemon destroys the pool as soon as no
 * client is attached to it and no sequence or request uses it.
 */
#define KVP_POOL_OWNED (1u << 0)
/*
 * POOL_DESTROY: remove the pool's disk tier file too (else it is kept, and a
 * pool of the same name and geometry made later hits what it holds).
 */
#define KVP_POOL_DESTROY_DROP_TIER (1u << 0)

/*
 * One request: 64 bytes, written by the client, copied out of the ring before
 * anything reads it. flags, resv1, resv2 and op_flags are checked for every
 * opcode; any other field an opcode does not use is ignored.
 */
struct kvp_sqe {
	__u8 opcode;      /* KVP_OP_*; others -EINVAL */
	__u8 flags;       /* reserved: must be zero (else -EINVAL) */
	__u16 resv1;      /* must be zero (else -EINVAL) */
	__u32 len;        /* count (tokens, ids, bytes), per opcode */
	__u64 handle;     /* sequence handle from SEQ_OPEN; a stale or foreign one gets -EBADF */
	__u64 user_data;  /* returned unchanged in the completion */
	__u64 addr;       /* arena offset of the input */
	__u64 out_addr;   /* arena offset of the output */
	__u32 out_len;    /* bytes available at out_addr */
	__u32 op_flags;   /* per-opcode flags (KVP_OPEN_*, KVP_ALLOC_*); a bit the opcode does not
			   * know gets -EINVAL */
	__u32 arg1;       /* SEQ_OPEN: prefix, ALLOC: lookahead tokens, *_KV: first position */
	__u32 arg2;       /* SEQ_OPEN: salt bytes, *_KV: KVP_KV_SEL(group, layer) */
	__u64 resv2;      /* must be zero (else -EINVAL) */
};

/* cqe.flags */
#define KVP_CQE_F_OVERFLOW (1u << 0) /* ALLOC succeeded but its id lists did not fit in out_len */
#define KVP_CQE_F_TIER (1u << 1)     /* ALLOC: its hit waited for blocks coming up from the
				      * pool's tier (its own promotions or another's) */
#define KVP_CQE_F_SNAPSHOT (1u << 2) /* ALLOC: its hit's window snapshots were copied into its
				      * cyclic rings first; COMMIT: it made window snapshots,
				      * copied out of the rings first */

/* One completion: 32 bytes, written by the daemon. */
struct kvp_cqe {
	__u64 user_data;  /* the request's sqe.user_data */
	__s32 res;        /* >= 0, or -errno */
	__u32 flags;      /* KVP_CQE_F_* */
	__u64 aux;        /* second result, per opcode; 0 when the opcode has none */
	__u64 resv;       /* zero */
};

/*
 * Per-group block ids, written by the daemon: a fixed 68-byte head (counts[]
 * always has KVP_MAX_GROUPS slots, those past num_groups zero), then ids[]:
 * group 0's counts[0] ids, then group 1's, and so on.
 */
struct kvp_block_lists {
	__u32 num_groups;             /* the pool's group count */
	__u32 counts[KVP_MAX_GROUPS]; /* ids per group */
	__u32 ids[];      /* sum(counts) entries; 0 = null block */
};

/* One sequence's queries in an ATTEND: positions first_pos .. first_pos + count - 1. */
struct kvp_attend_seq {
	__u64 handle;     /* sequence handle from SEQ_OPEN */
	__u32 first_pos;  /* position of the first query, tokens */
	__u32 count;      /* queries, >= 1 */
	__u64 q_off;      /* arena: Q [count][q_heads][head_dim] */
	__u64 out_off;    /* arena: the output, same shape and dtype as Q */
};

#define KVP_ATTEND_Q_F32 (1u << 0) /* Q and the output are f32, not the pool dtype */

/*
 * ATTEND input, written by the client: causal attention of each query over its
 * sequence's KV in one group and layer, with the group's mask. Many sequences
 * per entry make a decode step one request per layer. scale and softcap are
 * IEEE 754 binary32 (float), in host byte order.
 */
struct kvp_attend {
	__u16 group;      /* < the pool's num_groups (else -EINVAL) */
	__u16 layer;      /* < the pool's layers_per_group (else -EINVAL) */
	__u32 num_seqs;   /* entries in seqs[], 1..65536; sqe.len must cover them */
	__u32 q_heads;    /* a non-zero multiple of the pool's kv_heads */
	__u32 flags;      /* KVP_ATTEND_*; other bits -EINVAL */
	float scale;      /* multiplies q.k, before the softcap; finite (else -EINVAL) */
	float softcap;    /* > 0: logits become softcap * tanh(logit / softcap); 0: none;
			   * < 0, NaN or infinite: -EINVAL */
	__u64 resv;       /* must be zero (else -EINVAL) */
	struct kvp_attend_seq seqs[]; /* num_seqs entries */
};

/* Daemon -> client: POOL_STATS output, and part of each STATS pool entry. */
struct kvp_pool_stats {
	__u32 blocks_total; /* N, null block included */
	__u32 blocks_free;  /* free-queue length */
	__u32 blocks_used;  /* N - 1 - blocks_free */
	__u32 blocks_cached; /* blocks carrying a prefix-cache hash, used or free */
};

enum kvp_kind { KVP_KIND_FULL, KVP_KIND_SWA, KVP_KIND_RSWA, KVP_KIND_CHUNKED, KVP_KIND_CYCLIC };
enum kvp_dtype { KVP_DTYPE_F32, KVP_DTYPE_F16, KVP_DTYPE_BF16 };

/*
 * Client -> daemon, POOL_CREATE's input (the config file fills the same
 * struct). A value out of the ranges below gets -EINVAL.
 */
struct kvp_pool_params {
	char name[KVP_NAME_MAX]; /* 1..31 printable non-blank ASCII + NUL; -EEXIST if taken */
	__u32 num_blocks;      /* N, null block 0 included; 2..2^24 */
	__u32 block_size;      /* tokens per block, 1..2^30 */
	__u8 caching;          /* prefix caching: 1 = on, 0 = off */
	__u8 free_order;       /* 0 split (freed unhashed blocks to the head, hashed to the tail),
				* 1 append (all to the tail) */
	__u8 publish;          /* 0 commit (hash a block once computed), 1 alloc (hash full blocks
				* at ALLOC; -EINVAL for a pool with KV) */
	__u8 num_groups;       /* 1..KVP_MAX_GROUPS */
	__u32 max_len;         /* longest sequence, tokens, >= 1 */
	__u32 max_step_tokens; /* most tokens one ALLOC adds (len + lookahead), >= 1; sizes cyclic
				* rings */
	__u32 kv_heads;        /* KV geometry (the data path); 0: no KV memory, allocation only */
	__u32 head_dim;        /* elements per head row; kv_heads, head_dim and layers_per_group are
				* all 0 or all 1..1024 */
	__u32 dtype;           /* KVP_DTYPE_*, checked even without KV */
	__u32 layers_per_group; /* layers stored per group */
	__u8 group_kind[KVP_MAX_GROUPS];   /* KVP_KIND_*; entries past num_groups are not checked */
	__u32 group_param[KVP_MAX_GROUPS]; /* tokens: window W (SWA >= 2; RSWA, CYCLIC >= 1) or
					    * chunk C (>= 1), <= 2^30; unused for FULL */
	__u32 resv0;           /* must be zero (else -EINVAL) */
	__u64 resv[2];         /* must be zero (else -EINVAL) */
};

/* Where a pool's memory is (kvp_pool_params_v2.backend). */
enum kvp_backend {
	KVP_BACKEND_HOST = 0, /* a memfd in host memory */
	KVP_BACKEND_CUDA = 1, /* GPU memory (CUDA VMM), through the daemon's CUDA plugin */
};

/* How K and V lie in a pool's memory (kvp_pool_params_v2.layout); KVP_OP_POOL_LAYOUT tells. */
enum kvp_layout_kind {
	KVP_LAYOUT_DEFAULT = 0, /* BLOCK for host pools, LAYER for cuda pools */
	KVP_LAYOUT_BLOCK = 1,   /* a slot per block: per layer K then V, each
				 * [kv_heads][block_size][head_dim] */
	KVP_LAYOUT_LAYER = 2,   /* per layer one K and one V array, each
				 * [num_blocks][block_size][kv_heads][head_dim] (vLLM's
				 * FlashAttention layout) */
};

/*
 * POOL_CREATE with sqe.len == sizeof(struct kvp_pool_params_v2): v1 and where
 * and how its memory lies. sqe.len == sizeof(struct kvp_pool_params) is v1
 * (host, default layout, shared by all namespaces). A refusal writes its
 * reason to out_addr (NUL-terminated, at most KVP_REASON_MAX bytes, cut to
 * out_len) when out_len is not 0, with cqe.aux its length.
 */
struct kvp_pool_params_v2 {
	struct kvp_pool_params v1;
	__u32 backend;          /* KVP_BACKEND_*; others -EINVAL */
	__u32 device;           /* CUDA device ordinal (cuda); must be 0 for host */
	__u32 layout;           /* KVP_LAYOUT_*; others -EINVAL */
	__u32 resv0;            /* must be zero (else -EINVAL) */
	char namespace_[KVP_NAME_MAX]; /* "": any namespace's clients attach; a name: only
				 * that namespace's (others -EPERM), and they may map it */
	__u64 resv[8];          /* must be zero (else -EINVAL) */
};

/*
 * POOL_CREATE with sqe.len == sizeof(struct kvp_pool_params_v3) + keys_len
 * (KVP_FEAT_POOL_KEYS): v2, then keys_len bytes of text: `key = value` lines
 * with kvpool.conf(5)'s [pool.NAME] keys, parsed by the daemon's table for
 * that section (blank lines and lines starting with '#' or ';' are skipped; a
 * ';' after a blank starts a comment). Each key the text sets replaces v2's
 * field; keys that v2 has no field for (those added later) exist only here,
 * so they need no new struct. A key set twice, an unknown key, a bad value or
 * a NUL byte: -EINVAL with the reason naming the key.
 */
#define KVP_POOL_KEYS_MAX 4096 /* keys_len's most */
struct kvp_pool_params_v3 {
	struct kvp_pool_params_v2 v2;
	__u32 keys_len;         /* bytes of text after this struct, 0..KVP_POOL_KEYS_MAX */
	__u32 resv0;            /* must be zero (else -EINVAL) */
	__u64 resv[3];          /* must be zero (else -EINVAL) */
};

#define KVP_REASON_MAX 128   /* a refusal's reason text, NUL included */
#define KVP_MAP_FDS_PER_MSG 253 /* SCM_MAX_FD */

/*
 * POOL_MAP's messages on the connection socket, sent after its completion:
 * this header, with descriptors first..first+count-1 of total by SCM_RIGHTS.
 * tag is the request's user_data, so that a client that gave up on an earlier
 * POOL_MAP can tell its leftovers (close their descriptors and skip them).
 */
#define KVP_MAP_MAGIC 0x4b564d50u /* "KVMP" */
struct kvp_map_msg {
	__u32 magic;  /* KVP_MAP_MAGIC */
	__u32 first;  /* piece index of the first descriptor */
	__u32 count;  /* descriptors with this message */
	__u32 total;  /* pieces in all: the completion's res */
	__u64 tag;    /* the POOL_MAP's user_data */
	__u64 resv;   /* zero */
};

/* Memory kinds of struct kvp_kv_layout. */
enum kvp_mem_kind {
	KVP_MEM_HOST_MEMFD = 1, /* pieces are memfds: mmap(MAP_SHARED), read-write */
	KVP_MEM_CUDA = 2,       /* pieces are CUDA VMM shareable handles (POSIX fds) */
};

/*
 * Where one layer's K and V lie (layer l of every group: groups share the
 * pool's blocks). Element (block b, token t, kv head h, dim d) of K is at byte
 * k_off + b * block_stride + t * token_stride + h * head_stride + d * dtype
 * size of piece k_piece; V likewise from v_off in v_piece.
 */
struct kvp_kv_layer_layout {
	__u32 k_piece, v_piece;
	__u64 k_off, v_off;
	__u64 block_stride, token_stride, head_stride;
};

/*
 * KVP_OP_POOL_LAYOUT's output: this header, then num_layers struct
 * kvp_kv_layer_layout (layers 0..layers_per_group-1), then num_pieces __u64
 * piece sizes. Both layouts are described alike: an engine has one code path.
 */
struct kvp_kv_layout {
	__u32 mem_kind;         /* KVP_MEM_* */
	__u32 layout;           /* KVP_LAYOUT_BLOCK or KVP_LAYOUT_LAYER */
	__u64 total_bytes;      /* all pieces */
	__u32 num_pieces;       /* descriptors POOL_MAP sends */
	__u32 num_layers;       /* = layers_per_group */
	__u32 num_blocks, block_size, kv_heads, head_dim;
	__u32 dtype;            /* KVP_DTYPE_* */
	__u32 device;           /* CUDA ordinal; 0 for host */
	__u64 resv[2];          /* zero */
};

/*
 * Daemon -> client, STATS output. A client without KVP_FEAT_ADMIN is shown the
 * clients of its own uid only; the others are counted in other_clients.
 */
struct kvp_stats_header {
	__u32 num_pools;            /* struct kvp_pool_entry that follow */
	__u32 num_clients;          /* struct kvp_client_entry that follow: clients past setup */
	__u64 clients_connected;    /* since start */
	__u64 clients_disconnected; /* since start */
	__u64 clients_killed;       /* hung up with sequences open */
	__u32 other_clients;        /* clients past setup left out (other uids') */
	__u32 monitors;             /* KVP_FEAT_MONITOR connections now, never listed (zero from
				     * a daemon without that feature) */
	/* then struct kvp_pool_entry[num_pools], struct kvp_client_entry[num_clients] */
};

struct kvp_pool_entry {
	char name[KVP_NAME_MAX];    /* NUL-terminated */
	__u32 block_size;           /* tokens per block */
	struct kvp_pool_stats stats; /* as POOL_STATS */
	__u32 clients;              /* clients attached */
	__u32 sequences;            /* sequences open */
	__u32 resv;                 /* zero */
};

struct kvp_client_entry {
	__u32 client_id;     /* as kvp_setup_reply.client_id */
	__s32 pid;           /* peer credentials (SO_PEERCRED) at connect */
	__u32 uid;           /* likewise */
	__u32 sequences;     /* sequences open */
	char namespace_[KVP_NAME_MAX]; /* NUL-terminated */
	char pool[KVP_NAME_MAX];       /* attached pool; "" for none */
	__u64 blocks_held;   /* distinct blocks its sequences hold; 0 when attached to none */
	__u64 ops;           /* requests completed (failed ones included) */
};

/*
 * The stats page: a sealed memfd (F_SEAL_FUTURE_WRITE: readers can only map it
 * read-only) where the daemon keeps its counters as it serves, so reading them
 * never costs the daemon anything. Writes are bracketed by a seqlock: read
 * seq (retry while odd), copy what you need, read seq again, retry if it moved.
 * The daemon is its only writer; counters count since the daemon started.
 */
#define KVP_STATS_MAGIC 0x6b767374u /* "kvst" */
#define KVP_STATS_VERSION 1
/*
 * Quotas, one value each of a uid, a namespace (its clients together) or the
 * default for every uid, from the config; used and limit in struct
 * kvp_stats_tenant. Over a quota a request fails with -EDQUOT (a connection
 * over max_clients with -EUSERS).
 */
enum {
	KVP_QUOTA_CLIENTS,     /* connections */
	KVP_QUOTA_SEQUENCES,   /* open sequences */
	KVP_QUOTA_TOKENS,      /* tokens held in the sequences' token arrays */
	KVP_QUOTA_ARENA_BYTES, /* the connections' arenas, summed */
	KVP_QUOTA_BLOCKS,      /* distinct blocks its sequences hold, per pool */
	KVP_QUOTA_KEYS,
};
#define KVP_QUOTA_UNLIMITED (~0ull)
#define KVP_TENANT_UID 1
#define KVP_TENANT_NAMESPACE 2

#define KVP_EVENT_LOOP_IO_URING 1 /* liburing: multishot accept and poll */
#define KVP_EVENT_LOOP_EPOLL 2    /* epoll(7): where io_uring is refused (containers, gVisor) */
#define KVP_HIST_BUCKETS 40  /* bucket b: latencies in [2^b, 2^(b+1)) ns (b = 0: also 0;
			      * the last: everything longer) */
#define KVP_STATS_OPS 256    /* per-opcode entries, indexed by opcode */

struct kvp_stats_op {
	__u64 count;        /* completions of this opcode, failures included */
	__u64 errors;       /* completions with res < 0 */
	__u64 sum_ns;       /* their latencies in the daemon, summed, ns */
	__u64 hist[KVP_HIST_BUCKETS]; /* completions per latency bucket */
};

struct kvp_stats_group {
	__u32 kind;         /* KVP_KIND_* */
	__u32 param;        /* window W or chunk C, tokens */
	__u64 blocks_held;  /* blocks in use now that this group took */
	__u64 window_drops; /* blocks its windows dropped, total */
	__u64 tokens_held;  /* fragmentation: token slots of the blocks running sequences hold... */
	__u64 tokens_needed;/* ...and the tokens their masks need now (counted again when the
			     * pool's sequences change, within the second; 0 with no block used) */
};

struct kvp_stats_pool {
	__u32 in_use;       /* 0: an unused entry (all zero) */
	__u32 block_size;   /* tokens per block */
	char name[KVP_NAME_MAX]; /* NUL-terminated */
	__u32 blocks_total; /* N, null block included */
	__u32 blocks_free;  /* free-queue length */
	__u32 blocks_used;  /* N - 1 - blocks_free */
	__u32 blocks_cached; /* blocks carrying a prefix-cache hash, used or free */
	__u32 num_groups;   /* entries of groups[] in use */
	__u32 clients;      /* clients attached */
	__u32 sequences;    /* sequences open */
	__u32 resv;         /* zero */
	__u64 prefix_queries_tokens; /* at admission: ALLOC with the prefix cache, tokens offered */
	__u64 prefix_hits_tokens;    /* ...and tokens hit */
	__u64 lookup_queries_tokens; /* advisory LOOKUPs, tokens offered */
	__u64 lookup_hits_tokens;    /* ...and tokens hit */
	__u64 evictions_reuse;       /* a cached free block taken for new data */
	__u64 evictions_evict;       /* admin EVICT */
	__u64 evictions_reset;       /* admin RESET */
	__u64 nospace;               /* ALLOCs refused for want of blocks */
	struct kvp_stats_group groups[KVP_MAX_GROUPS]; /* [num_groups] used, the rest zero */
};

struct kvp_stats_client {
	__u32 in_use;       /* 0: an unused entry (all zero) */
	__u32 client_id;    /* as kvp_setup_reply.client_id */
	__s32 pid;          /* peer credentials (SO_PEERCRED) at connect */
	__u32 uid;          /* likewise */
	char namespace_[KVP_NAME_MAX]; /* NUL-terminated */
	char pool[KVP_NAME_MAX];       /* attached pool; "" for none */
	__u32 sequences;    /* sequences open */
	__u32 resv;         /* zero */
	__u64 blocks_held;  /* distinct blocks its sequences hold (the charging rule) */
	__u64 ops;          /* requests completed (failed ones included) */
};

/* A uid's, or a namespace's, use of its quotas (kvpd's [quota], [uid.N], [namespace.NAME]). */
struct kvp_stats_tenant {
	__u32 in_use;       /* 0: an unused entry (all zero) */
	__u32 kind;         /* KVP_TENANT_UID, KVP_TENANT_NAMESPACE */
	__u32 uid;          /* KVP_TENANT_UID */
	__u32 resv;         /* zero */
	char namespace_[KVP_NAME_MAX]; /* KVP_TENANT_NAMESPACE, NUL-terminated */
	__u64 used[KVP_QUOTA_KEYS];    /* blocks: in the pool where it holds most */
	__u64 limit[KVP_QUOTA_KEYS];   /* KVP_QUOTA_UNLIMITED: none */
};

/*
 * A pool's tier (tier_host_bytes or tier_disk_bytes): entry i of the page's
 * tiers is pools[i]'s, in_use 0 for a pool without one. Blocks are the
 * pool's, slot_bytes each (K and V of every layer). MB/s each way: bytes_* /
 * ns_* * 1000.
 */
#define KVP_TIER_HOST 1
#define KVP_TIER_DISK 2 /* a file, NAME.kvtier, that outlives the daemon */
/*
 * Why a cached block the pool handed out for new data was not in its tier
 * then: kvp_stats_tier.unoffered[] by index (docs/tiers.md). A block whose key
 * another pool block still carries is not counted: nothing was lost.
 */
#define KVP_TIER_UNOFFERED_WINDOW 0       /* handed out before the walk of the free
					   * queue's head reached it (a burst of ALLOCs
					   * took more than the window), not rescued (a
					   * disk tier, a mapped or cuda pool) */
#define KVP_TIER_UNOFFERED_QUEUE_FULL 1   /* the walk was held up: its copy queue full */
#define KVP_TIER_UNOFFERED_NO_SLOT 2      /* ...every slot of the tier being filled or read */
#define KVP_TIER_UNOFFERED_QUOTA 3        /* its tenant's max_tier_bytes, all of it being
					   * filled or read */
#define KVP_TIER_UNOFFERED_OVERWRITTEN 4  /* its copy, made ahead or after the hand-out, was
					   * not done when its new owner wrote it (abandoned) */
#define KVP_TIER_UNOFFERED_DECLINED 5     /* tier_policy second_sight kept it out */
#define KVP_TIER_UNOFFERED_DROPPED 6      /* copied, but the tier let the copy go first (its
					   * LRU, or a disk's failed write) */
#define KVP_TIER_UNOFFERED_WRITE_FAILED 7 /* a disk tier that stopped writing */
#define KVP_TIER_UNOFFERED_REASONS 8
#define KVP_TIER_UNOFFERED_MAX 12         /* the array's entries: those past _REASONS zero */
struct kvp_stats_tier {
	__u32 in_use;        /* 0: an unused entry (all zero) */
	__u32 kind;          /* KVP_TIER_HOST, KVP_TIER_DISK */
	__u64 bytes;         /* its memory, or its file's size */
	__u32 slots;         /* blocks it can hold */
	__u32 held;          /* blocks it holds, hittable */
	__u32 queued;        /* copies down in flight now */
	__u32 slot_bytes;    /* a block's K and V of every layer, as the tier holds it */
	__u64 stored;        /* blocks copied down and kept */
	__u64 skipped;       /* blocks not copied down: the queue was full or no slot free */
	__u64 abandoned;     /* copies dropped: their block was handed out meanwhile */
	__u64 evicted;       /* entries dropped for room */
	__u64 promoted;      /* blocks copied up into the pool by ALLOC */
	__u64 read_failures; /* blocks whose copy up failed, a disk's read or checksum included
			      * (the ALLOC failed with it) */
	__u64 hit_tokens;    /* ALLOC's hit tokens from its first promoted position on */
	__u64 bytes_down, bytes_up; /* copied into the tier, out of it */
	__u64 ns_down, ns_up;       /* the copies' time, job by job */
	/* A disk tier's; zero for a host tier. */
	__u64 restored;      /* blocks found on disk at the pool's start, hittable at once */
	__u64 refused;       /* blocks on disk never hit: a record or its bytes failed their
			      * checksum, past the file's end, a duplicate (at start or read) */
	__u64 write_failures; /* copies down the disk did not take (the tier stops writing at
			       * the first: the daemon's log says why) */
	__u64 declined;      /* blocks tier_policy second_sight kept out: first seen leaving */
	__u64 unoffered[KVP_TIER_UNOFFERED_MAX]; /* cached blocks the pool handed out that the
					  * tier did not hold, by KVP_TIER_UNOFFERED_* */
};

/*
 * A pool's KV events publisher (kv_events): entry i of the page's events is
 * pools[i]'s, in_use 0 for a pool without one. A batch is one ZMQ message
 * (one sequence number); dropped batches are gaps a subscriber sees in the
 * sequence, kept for replay all the same.
 */
#define KVP_EVENTS_MAP 1   /* each event a map with "type" (vLLM's current form) */
#define KVP_EVENTS_ARRAY 2 /* each event a tagged array (vLLM's older form) */
struct kvp_stats_events {
	__u32 in_use;        /* 0: an unused entry (all zero) */
	__u32 format;        /* KVP_EVENTS_MAP, KVP_EVENTS_ARRAY */
	__u64 batches;       /* batches made: the next sequence number */
	__u64 events;        /* events in them */
	__u64 blocks_stored; /* block hashes announced (BlockStored) */
	__u64 blocks_removed; /* block hashes withdrawn (BlockRemoved) */
	__u64 cleared;       /* AllBlocksCleared (pool resets) */
	__u64 sent;          /* batches handed to the PUB socket */
	__u64 bytes;         /* their payloads' bytes */
	__u64 dropped;       /* batches the full queue never sent (or that could not be made) */
	__u64 replays;       /* replay requests answered */
	__u64 replayed;      /* batches sent by replays */
	__u32 kept;          /* batches kept for replay now */
	__u32 queued;        /* batches waiting for the publisher now */
};

/* A pool's window snapshots (cyclic groups; docs/design.md), in blocks. */
struct kvp_stats_snapshots {
	__u32 in_use;        /* 0: the pool has no cyclic group, or caching off (all zero) */
	__u32 held;          /* blocks carrying a snapshot's key now (cached) */
	__u64 made;          /* snapshot blocks made (copied out of a ring and cached) */
	__u64 hit;           /* snapshot blocks copied into a hitting sequence's ring */
	__u64 evicted;       /* snapshot keys lost: block reused, EVICT, RESET */
	__u64 skipped;       /* snapshot blocks not made: the free queue was empty */
};

/*
 * A pool's cluster tier (tier_remote; docs/tiers.md, "The cluster tier"):
 * entry i of the page's remote rows is pools[i]'s, in_use 0 for a pool
 * without one. refused[] counts values read back and not served, by
 * KVP_REMOTE_REFUSED_*.
 */
#define KVP_REMOTE_REFUSED_HEADER 0   /* not a value of this format (magic, version, length) */
#define KVP_REMOTE_REFUSED_GEOMETRY 1 /* another pool geometry's */
#define KVP_REMOTE_REFUSED_CHECKSUM 2 /* its data failed its checksum */
#define KVP_REMOTE_REFUSED_MISSING 3  /* gone between the existence round and its read */
#define KVP_REMOTE_REFUSED_LATE 4     /* not read by its deadline */
#define KVP_REMOTE_REFUSED_TAG 5      /* the pool has a key (tier_remote_key_file): its tag is
				       * missing or wrong */
#define KVP_REMOTE_REFUSED_MAX 8      /* the array's entries: those past the kinds zero */
struct kvp_stats_remote {
	__u32 in_use;         /* 0: an unused entry (all zero) */
	__u32 cluster;        /* 1: a Redis Cluster (slots route keys), 0: one server */
	__u32 nodes_known;    /* seeds and masters the tier knows */
	__u32 nodes_answering; /* those whose last round answered in time */
	__u32 queued;         /* blocks in sends now */
	__u32 nodes_down;     /* nodes in an outage now (unreachable, misses meanwhile) */
	__u64 sent;           /* blocks written to the cluster (write-through at commit) */
	__u64 skipped;        /* blocks not written: the send queue full, or a node down, late
			       * or refusing */
	__u64 deduplicated;   /* blocks not sent: the cluster holds them (written or read lately) */
	__u64 hit_tokens;     /* ALLOC's hit tokens the cluster gave */
	__u64 promoted;       /* blocks read from the cluster into the pool */
	__u64 bytes_out, bytes_in;
	__u64 rounds;         /* existence rounds (LOOKUP, ALLOC with the cache) */
	__u64 timeouts;       /* rounds past tier_remote_timeout_ms */
	__u64 round_p50_ns, round_p99_ns; /* rounds' latency */
	__u64 moved;          /* MOVED replies: the slot map read again */
	__u64 refused[KVP_REMOTE_REFUSED_MAX];
	__u64 send_errors;    /* blocks whose SET a node answered with an error (NOPERM, OOM...) */
	__u64 asked;          /* ASK redirects followed (a slot migrating) */
	__u64 outages;        /* nodes that became unreachable */
	__u64 resv[1];        /* zero */
};

/*
 * The page a client without KVP_FEAT_ADMIN maps is its uid's: client rows of
 * that uid only (the others counted in other_clients), and its uid's tenant
 * row; pools and operations are the daemon's.
 */
struct kvp_stats_page {
	__u32 magic;        /* KVP_STATS_MAGIC */
	__u32 version;      /* KVP_STATS_VERSION */
	__u32 seq;          /* seqlock: odd while the daemon writes */
	__u32 max_pools;    /* entries at pools_off */
	__u32 max_clients;  /* entries at clients_off (the daemon's max_clients) */
	__u32 hist_buckets; /* KVP_HIST_BUCKETS */
	__u64 page_bytes;   /* size of the page (reply.stats_bytes) */
	__u64 pools_off;    /* bytes from the page's start: struct kvp_stats_pool[max_pools] */
	__u64 clients_off;  /* likewise: struct kvp_stats_client[max_clients] */
	__u64 ops_off;      /* likewise: struct kvp_stats_op[KVP_STATS_OPS] */
	__u64 start_realtime_ns; /* CLOCK_REALTIME when the daemon started, ns */
	__u64 update_ns;    /* CLOCK_MONOTONIC of the last update, ns */
	__u64 clients_connected;    /* since start */
	__u64 clients_disconnected; /* since start */
	__u64 clients_killed; /* hung up with sequences open */
	__u32 event_loop;   /* KVP_EVENT_LOOP_* the daemon runs (0 from a daemon before ABI 2) */
	__u32 other_clients; /* clients past setup whose rows this page leaves out */
	__u64 tenants_off;  /* bytes from the page's start: struct kvp_stats_tenant[max_tenants] */
	__u32 max_tenants;  /* entries at tenants_off */
	__u32 monitors;     /* KVP_FEAT_MONITOR connections now: no client rows, not in
			     * clients_connected (zero from a daemon without that feature) */
	__s32 daemon_pid;   /* the daemon's pid (zero from a daemon before 0.2.0): with socket
			     * activation, a connection's peer credentials are systemd's */
	__u32 resv0;        /* zero */
	__u64 tiers_off;    /* bytes from the page's start: struct kvp_stats_tier[max_pools]
			     * (zero from a daemon without tiers) */
	__u64 events_off;   /* likewise: struct kvp_stats_events[max_pools]; a page whose
			     * pools_off is under 144 has no such field (a daemon before KV events) */
	__u64 snapshots_off; /* likewise: struct kvp_stats_snapshots[max_pools]; a page whose
			      * pools_off is under 152 has no such field (a daemon before
			      * window snapshots) */
	__u64 remote_off;    /* likewise: struct kvp_stats_remote[max_pools]
			      * (KVP_FEAT_TIER_REMOTE); a page whose pools_off is under 160 has
			      * no such field */
};

/*
 * The layout, pinned. Offsets use __builtin_offsetof (GCC, Clang) so that the
 * header needs nothing beyond <linux/types.h>.
 */
/* kvp_attend's float fields must be IEEE 754 binary32. */
_Static_assert(sizeof(float) == 4, "float is IEEE 754 binary32");
#if defined(__FLT_RADIX__) && defined(__FLT_MANT_DIG__) && defined(__FLT_MAX_EXP__)
_Static_assert(__FLT_RADIX__ == 2 && __FLT_MANT_DIG__ == 24 && __FLT_MAX_EXP__ == 128,
	       "float is IEEE 754 binary32");
#endif

_Static_assert(sizeof(struct kvp_setup) == 128, "kvp_setup");
_Static_assert(__builtin_offsetof(struct kvp_setup, magic) == 0, "kvp_setup.magic");
_Static_assert(__builtin_offsetof(struct kvp_setup, abi_version) == 4, "kvp_setup.abi_version");
_Static_assert(__builtin_offsetof(struct kvp_setup, sq_entries) == 8, "kvp_setup.sq_entries");
_Static_assert(__builtin_offsetof(struct kvp_setup, cq_entries) == 12, "kvp_setup.cq_entries");
_Static_assert(__builtin_offsetof(struct kvp_setup, arena_bytes) == 16, "kvp_setup.arena_bytes");
_Static_assert(__builtin_offsetof(struct kvp_setup, features) == 24, "kvp_setup.features");
_Static_assert(__builtin_offsetof(struct kvp_setup, pool) == 32, "kvp_setup.pool");
_Static_assert(__builtin_offsetof(struct kvp_setup, namespace_) == 64, "kvp_setup.namespace_");
_Static_assert(__builtin_offsetof(struct kvp_setup, resv) == 96, "kvp_setup.resv");

_Static_assert(sizeof(struct kvp_sq_offsets) == 32, "kvp_sq_offsets");
_Static_assert(__builtin_offsetof(struct kvp_sq_offsets, head) == 0, "kvp_sq_offsets.head");
_Static_assert(__builtin_offsetof(struct kvp_sq_offsets, tail) == 4, "kvp_sq_offsets.tail");
_Static_assert(__builtin_offsetof(struct kvp_sq_offsets, flags) == 8, "kvp_sq_offsets.flags");
_Static_assert(__builtin_offsetof(struct kvp_sq_offsets, entries) == 12, "kvp_sq_offsets.entries");
_Static_assert(__builtin_offsetof(struct kvp_sq_offsets, sqes) == 16, "kvp_sq_offsets.sqes");
_Static_assert(__builtin_offsetof(struct kvp_sq_offsets, resv) == 20, "kvp_sq_offsets.resv");

_Static_assert(sizeof(struct kvp_cq_offsets) == 32, "kvp_cq_offsets");
_Static_assert(__builtin_offsetof(struct kvp_cq_offsets, head) == 0, "kvp_cq_offsets.head");
_Static_assert(__builtin_offsetof(struct kvp_cq_offsets, tail) == 4, "kvp_cq_offsets.tail");
_Static_assert(__builtin_offsetof(struct kvp_cq_offsets, flags) == 8, "kvp_cq_offsets.flags");
_Static_assert(__builtin_offsetof(struct kvp_cq_offsets, entries) == 12, "kvp_cq_offsets.entries");
_Static_assert(__builtin_offsetof(struct kvp_cq_offsets, cqes) == 16, "kvp_cq_offsets.cqes");
_Static_assert(__builtin_offsetof(struct kvp_cq_offsets, resv) == 20, "kvp_cq_offsets.resv");

_Static_assert(sizeof(struct kvp_pool_info) == 112, "kvp_pool_info");
_Static_assert(__builtin_offsetof(struct kvp_pool_info, num_blocks) == 0,
	       "kvp_pool_info.num_blocks");
_Static_assert(__builtin_offsetof(struct kvp_pool_info, block_size) == 4,
	       "kvp_pool_info.block_size");
_Static_assert(__builtin_offsetof(struct kvp_pool_info, num_groups) == 8,
	       "kvp_pool_info.num_groups");
_Static_assert(__builtin_offsetof(struct kvp_pool_info, max_len) == 12, "kvp_pool_info.max_len");
_Static_assert(__builtin_offsetof(struct kvp_pool_info, group_kind) == 16,
	       "kvp_pool_info.group_kind");
_Static_assert(__builtin_offsetof(struct kvp_pool_info, group_param) == 32,
	       "kvp_pool_info.group_param");
_Static_assert(__builtin_offsetof(struct kvp_pool_info, kv_heads) == 96, "kvp_pool_info.kv_heads");
_Static_assert(__builtin_offsetof(struct kvp_pool_info, head_dim) == 100, "kvp_pool_info.head_dim");
_Static_assert(__builtin_offsetof(struct kvp_pool_info, dtype) == 104, "kvp_pool_info.dtype");
_Static_assert(__builtin_offsetof(struct kvp_pool_info, layers_per_group) == 108,
	       "kvp_pool_info.layers_per_group");

_Static_assert(sizeof(struct kvp_setup_reply) == 256, "kvp_setup_reply");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, result) == 0, "kvp_setup_reply.result");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, client_id) == 4,
	       "kvp_setup_reply.client_id");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, features) == 8,
	       "kvp_setup_reply.features");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, mmap_bytes) == 16,
	       "kvp_setup_reply.mmap_bytes");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, sq_entries) == 24,
	       "kvp_setup_reply.sq_entries");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, cq_entries) == 28,
	       "kvp_setup_reply.cq_entries");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, sq_off) == 32, "kvp_setup_reply.sq_off");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, cq_off) == 64, "kvp_setup_reply.cq_off");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, arena_off) == 96,
	       "kvp_setup_reply.arena_off");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, arena_bytes) == 104,
	       "kvp_setup_reply.arena_bytes");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, pool) == 112, "kvp_setup_reply.pool");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, stats_bytes) == 224,
	       "kvp_setup_reply.stats_bytes");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, abi_version) == 232,
	       "kvp_setup_reply.abi_version");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, version) == 236,
	       "kvp_setup_reply.version");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, boot_id) == 240,
	       "kvp_setup_reply.boot_id");
_Static_assert(__builtin_offsetof(struct kvp_setup_reply, pool_generation) == 248,
	       "kvp_setup_reply.pool_generation");

_Static_assert(sizeof(struct kvp_sqe) == 64, "kvp_sqe");
_Static_assert(__builtin_offsetof(struct kvp_sqe, opcode) == 0, "kvp_sqe.opcode");
_Static_assert(__builtin_offsetof(struct kvp_sqe, flags) == 1, "kvp_sqe.flags");
_Static_assert(__builtin_offsetof(struct kvp_sqe, resv1) == 2, "kvp_sqe.resv1");
_Static_assert(__builtin_offsetof(struct kvp_sqe, len) == 4, "kvp_sqe.len");
_Static_assert(__builtin_offsetof(struct kvp_sqe, handle) == 8, "kvp_sqe.handle");
_Static_assert(__builtin_offsetof(struct kvp_sqe, user_data) == 16, "kvp_sqe.user_data");
_Static_assert(__builtin_offsetof(struct kvp_sqe, addr) == 24, "kvp_sqe.addr");
_Static_assert(__builtin_offsetof(struct kvp_sqe, out_addr) == 32, "kvp_sqe.out_addr");
_Static_assert(__builtin_offsetof(struct kvp_sqe, out_len) == 40, "kvp_sqe.out_len");
_Static_assert(__builtin_offsetof(struct kvp_sqe, op_flags) == 44, "kvp_sqe.op_flags");
_Static_assert(__builtin_offsetof(struct kvp_sqe, arg1) == 48, "kvp_sqe.arg1");
_Static_assert(__builtin_offsetof(struct kvp_sqe, arg2) == 52, "kvp_sqe.arg2");
_Static_assert(__builtin_offsetof(struct kvp_sqe, resv2) == 56, "kvp_sqe.resv2");

_Static_assert(sizeof(struct kvp_cqe) == 32, "kvp_cqe");
_Static_assert(__builtin_offsetof(struct kvp_cqe, user_data) == 0, "kvp_cqe.user_data");
_Static_assert(__builtin_offsetof(struct kvp_cqe, res) == 8, "kvp_cqe.res");
_Static_assert(__builtin_offsetof(struct kvp_cqe, flags) == 12, "kvp_cqe.flags");
_Static_assert(__builtin_offsetof(struct kvp_cqe, aux) == 16, "kvp_cqe.aux");
_Static_assert(__builtin_offsetof(struct kvp_cqe, resv) == 24, "kvp_cqe.resv");

_Static_assert(sizeof(struct kvp_block_lists) == 68, "kvp_block_lists");
_Static_assert(__builtin_offsetof(struct kvp_block_lists, num_groups) == 0,
	       "kvp_block_lists.num_groups");
_Static_assert(__builtin_offsetof(struct kvp_block_lists, counts) == 4, "kvp_block_lists.counts");
_Static_assert(__builtin_offsetof(struct kvp_block_lists, ids) == 68, "kvp_block_lists.ids");

_Static_assert(sizeof(struct kvp_attend_seq) == 32, "kvp_attend_seq");
_Static_assert(__builtin_offsetof(struct kvp_attend_seq, handle) == 0, "kvp_attend_seq.handle");
_Static_assert(__builtin_offsetof(struct kvp_attend_seq, first_pos) == 8,
	       "kvp_attend_seq.first_pos");
_Static_assert(__builtin_offsetof(struct kvp_attend_seq, count) == 12, "kvp_attend_seq.count");
_Static_assert(__builtin_offsetof(struct kvp_attend_seq, q_off) == 16, "kvp_attend_seq.q_off");
_Static_assert(__builtin_offsetof(struct kvp_attend_seq, out_off) == 24, "kvp_attend_seq.out_off");

_Static_assert(sizeof(struct kvp_attend) == 32, "kvp_attend");
_Static_assert(__builtin_offsetof(struct kvp_attend, group) == 0, "kvp_attend.group");
_Static_assert(__builtin_offsetof(struct kvp_attend, layer) == 2, "kvp_attend.layer");
_Static_assert(__builtin_offsetof(struct kvp_attend, num_seqs) == 4, "kvp_attend.num_seqs");
_Static_assert(__builtin_offsetof(struct kvp_attend, q_heads) == 8, "kvp_attend.q_heads");
_Static_assert(__builtin_offsetof(struct kvp_attend, flags) == 12, "kvp_attend.flags");
_Static_assert(__builtin_offsetof(struct kvp_attend, scale) == 16, "kvp_attend.scale");
_Static_assert(__builtin_offsetof(struct kvp_attend, softcap) == 20, "kvp_attend.softcap");
_Static_assert(__builtin_offsetof(struct kvp_attend, resv) == 24, "kvp_attend.resv");
_Static_assert(__builtin_offsetof(struct kvp_attend, seqs) == 32, "kvp_attend.seqs");

_Static_assert(sizeof(struct kvp_pool_stats) == 16, "kvp_pool_stats");
_Static_assert(__builtin_offsetof(struct kvp_pool_stats, blocks_total) == 0,
	       "kvp_pool_stats.blocks_total");
_Static_assert(__builtin_offsetof(struct kvp_pool_stats, blocks_free) == 4,
	       "kvp_pool_stats.blocks_free");
_Static_assert(__builtin_offsetof(struct kvp_pool_stats, blocks_used) == 8,
	       "kvp_pool_stats.blocks_used");
_Static_assert(__builtin_offsetof(struct kvp_pool_stats, blocks_cached) == 12,
	       "kvp_pool_stats.blocks_cached");

_Static_assert(sizeof(struct kvp_pool_params) == 168, "kvp_pool_params");
_Static_assert(sizeof(struct kvp_pool_params_v2) == 280, "kvp_pool_params_v2");
_Static_assert(sizeof(struct kvp_pool_params_v3) == 312, "kvp_pool_params_v3");
_Static_assert(__builtin_offsetof(struct kvp_pool_params_v3, keys_len) == 280,
	       "kvp_pool_params_v3.keys_len");
_Static_assert(__builtin_offsetof(struct kvp_pool_params_v3, resv) == 288,
	       "kvp_pool_params_v3.resv");
_Static_assert(__builtin_offsetof(struct kvp_pool_params_v2, backend) == 168,
	       "kvp_pool_params_v2.backend");
_Static_assert(__builtin_offsetof(struct kvp_pool_params_v2, namespace_) == 184,
	       "kvp_pool_params_v2.namespace_");
_Static_assert(__builtin_offsetof(struct kvp_pool_params_v2, resv) == 216,
	       "kvp_pool_params_v2.resv");
_Static_assert(sizeof(struct kvp_kv_layer_layout) == 48, "kvp_kv_layer_layout");
_Static_assert(__builtin_offsetof(struct kvp_kv_layer_layout, k_off) == 8,
	       "kvp_kv_layer_layout.k_off");
_Static_assert(__builtin_offsetof(struct kvp_kv_layer_layout, head_stride) == 40,
	       "kvp_kv_layer_layout.head_stride");
_Static_assert(sizeof(struct kvp_kv_layout) == 64, "kvp_kv_layout");
_Static_assert(sizeof(struct kvp_map_msg) == 32, "kvp_map_msg");
_Static_assert(sizeof(struct kvp_stats_tier) == 248, "kvp_stats_tier");
_Static_assert(__builtin_offsetof(struct kvp_stats_tier, unoffered) == 152,
	       "kvp_stats_tier.unoffered");
_Static_assert(__builtin_offsetof(struct kvp_stats_tier, stored) == 32, "kvp_stats_tier.stored");
_Static_assert(__builtin_offsetof(struct kvp_kv_layout, num_pieces) == 16,
	       "kvp_kv_layout.num_pieces");
_Static_assert(__builtin_offsetof(struct kvp_kv_layout, resv) == 48, "kvp_kv_layout.resv");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, name) == 0, "kvp_pool_params.name");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, num_blocks) == 32,
	       "kvp_pool_params.num_blocks");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, block_size) == 36,
	       "kvp_pool_params.block_size");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, caching) == 40,
	       "kvp_pool_params.caching");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, free_order) == 41,
	       "kvp_pool_params.free_order");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, publish) == 42,
	       "kvp_pool_params.publish");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, num_groups) == 43,
	       "kvp_pool_params.num_groups");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, max_len) == 44,
	       "kvp_pool_params.max_len");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, max_step_tokens) == 48,
	       "kvp_pool_params.max_step_tokens");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, kv_heads) == 52,
	       "kvp_pool_params.kv_heads");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, head_dim) == 56,
	       "kvp_pool_params.head_dim");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, dtype) == 60, "kvp_pool_params.dtype");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, layers_per_group) == 64,
	       "kvp_pool_params.layers_per_group");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, group_kind) == 68,
	       "kvp_pool_params.group_kind");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, group_param) == 84,
	       "kvp_pool_params.group_param");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, resv0) == 148, "kvp_pool_params.resv0");
_Static_assert(__builtin_offsetof(struct kvp_pool_params, resv) == 152, "kvp_pool_params.resv");

_Static_assert(sizeof(struct kvp_stats_header) == 40, "kvp_stats_header");
_Static_assert(__builtin_offsetof(struct kvp_stats_header, num_pools) == 0,
	       "kvp_stats_header.num_pools");
_Static_assert(__builtin_offsetof(struct kvp_stats_header, num_clients) == 4,
	       "kvp_stats_header.num_clients");
_Static_assert(__builtin_offsetof(struct kvp_stats_header, clients_connected) == 8,
	       "kvp_stats_header.clients_connected");
_Static_assert(__builtin_offsetof(struct kvp_stats_header, clients_disconnected) == 16,
	       "kvp_stats_header.clients_disconnected");
_Static_assert(__builtin_offsetof(struct kvp_stats_header, clients_killed) == 24,
	       "kvp_stats_header.clients_killed");
_Static_assert(__builtin_offsetof(struct kvp_stats_header, other_clients) == 32,
	       "kvp_stats_header.other_clients");
_Static_assert(__builtin_offsetof(struct kvp_stats_header, monitors) == 36,
	       "kvp_stats_header.monitors");

_Static_assert(sizeof(struct kvp_pool_entry) == 64, "kvp_pool_entry");
_Static_assert(__builtin_offsetof(struct kvp_pool_entry, name) == 0, "kvp_pool_entry.name");
_Static_assert(__builtin_offsetof(struct kvp_pool_entry, block_size) == 32,
	       "kvp_pool_entry.block_size");
_Static_assert(__builtin_offsetof(struct kvp_pool_entry, stats) == 36, "kvp_pool_entry.stats");
_Static_assert(__builtin_offsetof(struct kvp_pool_entry, clients) == 52, "kvp_pool_entry.clients");
_Static_assert(__builtin_offsetof(struct kvp_pool_entry, sequences) == 56,
	       "kvp_pool_entry.sequences");
_Static_assert(__builtin_offsetof(struct kvp_pool_entry, resv) == 60, "kvp_pool_entry.resv");

_Static_assert(sizeof(struct kvp_client_entry) == 96, "kvp_client_entry");
_Static_assert(__builtin_offsetof(struct kvp_client_entry, client_id) == 0,
	       "kvp_client_entry.client_id");
_Static_assert(__builtin_offsetof(struct kvp_client_entry, pid) == 4, "kvp_client_entry.pid");
_Static_assert(__builtin_offsetof(struct kvp_client_entry, uid) == 8, "kvp_client_entry.uid");
_Static_assert(__builtin_offsetof(struct kvp_client_entry, sequences) == 12,
	       "kvp_client_entry.sequences");
_Static_assert(__builtin_offsetof(struct kvp_client_entry, namespace_) == 16,
	       "kvp_client_entry.namespace_");
_Static_assert(__builtin_offsetof(struct kvp_client_entry, pool) == 48, "kvp_client_entry.pool");
_Static_assert(__builtin_offsetof(struct kvp_client_entry, blocks_held) == 80,
	       "kvp_client_entry.blocks_held");
_Static_assert(__builtin_offsetof(struct kvp_client_entry, ops) == 88, "kvp_client_entry.ops");

_Static_assert(sizeof(struct kvp_stats_op) == 344, "kvp_stats_op");
_Static_assert(__builtin_offsetof(struct kvp_stats_op, count) == 0, "kvp_stats_op.count");
_Static_assert(__builtin_offsetof(struct kvp_stats_op, errors) == 8, "kvp_stats_op.errors");
_Static_assert(__builtin_offsetof(struct kvp_stats_op, sum_ns) == 16, "kvp_stats_op.sum_ns");
_Static_assert(__builtin_offsetof(struct kvp_stats_op, hist) == 24, "kvp_stats_op.hist");

_Static_assert(sizeof(struct kvp_stats_group) == 40, "kvp_stats_group");
_Static_assert(__builtin_offsetof(struct kvp_stats_group, kind) == 0, "kvp_stats_group.kind");
_Static_assert(__builtin_offsetof(struct kvp_stats_group, param) == 4, "kvp_stats_group.param");
_Static_assert(__builtin_offsetof(struct kvp_stats_group, blocks_held) == 8,
	       "kvp_stats_group.blocks_held");
_Static_assert(__builtin_offsetof(struct kvp_stats_group, window_drops) == 16,
	       "kvp_stats_group.window_drops");
_Static_assert(__builtin_offsetof(struct kvp_stats_group, tokens_held) == 24,
	       "kvp_stats_group.tokens_held");
_Static_assert(__builtin_offsetof(struct kvp_stats_group, tokens_needed) == 32,
	       "kvp_stats_group.tokens_needed");

_Static_assert(sizeof(struct kvp_stats_pool) == 776, "kvp_stats_pool");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, in_use) == 0, "kvp_stats_pool.in_use");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, block_size) == 4,
	       "kvp_stats_pool.block_size");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, name) == 8, "kvp_stats_pool.name");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, blocks_total) == 40,
	       "kvp_stats_pool.blocks_total");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, blocks_free) == 44,
	       "kvp_stats_pool.blocks_free");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, blocks_used) == 48,
	       "kvp_stats_pool.blocks_used");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, blocks_cached) == 52,
	       "kvp_stats_pool.blocks_cached");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, num_groups) == 56,
	       "kvp_stats_pool.num_groups");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, clients) == 60, "kvp_stats_pool.clients");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, sequences) == 64,
	       "kvp_stats_pool.sequences");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, resv) == 68, "kvp_stats_pool.resv");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, prefix_queries_tokens) == 72,
	       "kvp_stats_pool.prefix_queries_tokens");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, prefix_hits_tokens) == 80,
	       "kvp_stats_pool.prefix_hits_tokens");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, lookup_queries_tokens) == 88,
	       "kvp_stats_pool.lookup_queries_tokens");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, lookup_hits_tokens) == 96,
	       "kvp_stats_pool.lookup_hits_tokens");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, evictions_reuse) == 104,
	       "kvp_stats_pool.evictions_reuse");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, evictions_evict) == 112,
	       "kvp_stats_pool.evictions_evict");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, evictions_reset) == 120,
	       "kvp_stats_pool.evictions_reset");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, nospace) == 128, "kvp_stats_pool.nospace");
_Static_assert(__builtin_offsetof(struct kvp_stats_pool, groups) == 136, "kvp_stats_pool.groups");

_Static_assert(sizeof(struct kvp_stats_client) == 104, "kvp_stats_client");
_Static_assert(__builtin_offsetof(struct kvp_stats_client, in_use) == 0, "kvp_stats_client.in_use");
_Static_assert(__builtin_offsetof(struct kvp_stats_client, client_id) == 4,
	       "kvp_stats_client.client_id");
_Static_assert(__builtin_offsetof(struct kvp_stats_client, pid) == 8, "kvp_stats_client.pid");
_Static_assert(__builtin_offsetof(struct kvp_stats_client, uid) == 12, "kvp_stats_client.uid");
_Static_assert(__builtin_offsetof(struct kvp_stats_client, namespace_) == 16,
	       "kvp_stats_client.namespace_");
_Static_assert(__builtin_offsetof(struct kvp_stats_client, pool) == 48, "kvp_stats_client.pool");
_Static_assert(__builtin_offsetof(struct kvp_stats_client, sequences) == 80,
	       "kvp_stats_client.sequences");
_Static_assert(__builtin_offsetof(struct kvp_stats_client, resv) == 84, "kvp_stats_client.resv");
_Static_assert(__builtin_offsetof(struct kvp_stats_client, blocks_held) == 88,
	       "kvp_stats_client.blocks_held");
_Static_assert(__builtin_offsetof(struct kvp_stats_client, ops) == 96, "kvp_stats_client.ops");

_Static_assert(__builtin_offsetof(struct kvp_stats_page, magic) == 0, "kvp_stats_page.magic");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, version) == 4, "kvp_stats_page.version");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, seq) == 8, "kvp_stats_page.seq");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, max_pools) == 12,
	       "kvp_stats_page.max_pools");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, max_clients) == 16,
	       "kvp_stats_page.max_clients");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, hist_buckets) == 20,
	       "kvp_stats_page.hist_buckets");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, page_bytes) == 24,
	       "kvp_stats_page.page_bytes");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, pools_off) == 32,
	       "kvp_stats_page.pools_off");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, clients_off) == 40,
	       "kvp_stats_page.clients_off");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, ops_off) == 48, "kvp_stats_page.ops_off");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, start_realtime_ns) == 56,
	       "kvp_stats_page.start_realtime_ns");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, update_ns) == 64,
	       "kvp_stats_page.update_ns");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, clients_connected) == 72,
	       "kvp_stats_page.clients_connected");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, clients_disconnected) == 80,
	       "kvp_stats_page.clients_disconnected");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, clients_killed) == 88,
	       "kvp_stats_page.clients_killed");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, event_loop) == 96,
	       "kvp_stats_page.event_loop");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, other_clients) == 100,
	       "kvp_stats_page.other_clients");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, tenants_off) == 104,
	       "kvp_stats_page.tenants_off");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, max_tenants) == 112,
	       "kvp_stats_page.max_tenants");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, monitors) == 116,
	       "kvp_stats_page.monitors");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, daemon_pid) == 120,
	       "kvp_stats_page.daemon_pid");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, tiers_off) == 128,
	       "kvp_stats_page.tiers_off");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, events_off) == 136,
	       "kvp_stats_page.events_off");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, snapshots_off) == 144,
	       "kvp_stats_page.snapshots_off");
_Static_assert(__builtin_offsetof(struct kvp_stats_page, remote_off) == 152,
	       "kvp_stats_page.remote_off");
_Static_assert(sizeof(struct kvp_stats_page) == 160, "kvp_stats_page");
_Static_assert(sizeof(struct kvp_stats_snapshots) == 40, "kvp_stats_snapshots");
_Static_assert(sizeof(struct kvp_stats_remote) == 216, "kvp_stats_remote");
_Static_assert(__builtin_offsetof(struct kvp_stats_remote, sent) == 24, "kvp_stats_remote.sent");
_Static_assert(__builtin_offsetof(struct kvp_stats_remote, refused) == 120,
	       "kvp_stats_remote.refused");
_Static_assert(__builtin_offsetof(struct kvp_stats_snapshots, made) == 8,
	       "kvp_stats_snapshots.made");
_Static_assert(sizeof(struct kvp_stats_events) == 96, "kvp_stats_events");
_Static_assert(__builtin_offsetof(struct kvp_stats_events, kept) == 88, "kvp_stats_events.kept");
_Static_assert(sizeof(struct kvp_stats_tenant) == 128, "kvp_stats_tenant");
_Static_assert(__builtin_offsetof(struct kvp_stats_tenant, namespace_) == 16,
	       "kvp_stats_tenant.namespace_");
_Static_assert(__builtin_offsetof(struct kvp_stats_tenant, used) == 48, "kvp_stats_tenant.used");
_Static_assert(__builtin_offsetof(struct kvp_stats_tenant, limit) == 88, "kvp_stats_tenant.limit");

/* Values that cross the socket and the rings. */
_Static_assert(KVP_FD_MEM == 0 && KVP_FD_DOORBELL == 1 && KVP_FD_STATS == 2 && KVP_NUM_FDS == 3,
	       "descriptor order");
_Static_assert(KVP_OP_NOP == 0 && KVP_OP_SEQ_OPEN == 1 && KVP_OP_SEQ_CLOSE == 2 &&
	       KVP_OP_APPEND_TOKENS == 3 && KVP_OP_LOOKUP == 4 && KVP_OP_ALLOC == 5 &&
	       KVP_OP_COMMIT == 6 && KVP_OP_FREE == 7 && KVP_OP_GET_TABLE == 8 &&
	       KVP_OP_POOL_STATS == 9 && KVP_OP_STATS == 10 && KVP_OP_ATTACH == 11 &&
	       KVP_OP_WRITE_KV == 12 && KVP_OP_READ_KV == 13 && KVP_OP_ATTEND == 14, "opcodes");
_Static_assert(KVP_OP_POOL_CREATE == 64 && KVP_OP_POOL_DESTROY == 65 && KVP_OP_EVICT == 66 &&
	       KVP_OP_RESET == 67 && KVP_OP_DUMP_FREEQ == 68 && KVP_OP_CHECK == 69 &&
	       KVP_OP_POOL_SYNC == 70 && KVP_OP_POOL_PURGE_REMOTE == 71 &&
	       KVP_OP_DAEMON_RESTART == 72 &&
	       KVP_OP_LAST <= KVP_STATS_OPS, "admin opcodes");
_Static_assert(KVP_KIND_FULL == 0 && KVP_KIND_SWA == 1 && KVP_KIND_RSWA == 2 &&
	       KVP_KIND_CHUNKED == 3 && KVP_KIND_CYCLIC == 4, "group kinds");
_Static_assert(KVP_DTYPE_F32 == 0 && KVP_DTYPE_F16 == 1 && KVP_DTYPE_BF16 == 2, "dtypes");

#endif
