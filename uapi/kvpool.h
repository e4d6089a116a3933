/* SPDX-License-Identifier: MIT */
/*
 * kvpool ABI: what a client process and kvpoold exchange.
 *
 * A client connects to the daemon's Unix socket (SOCK_SEQPACKET), sends one
 * struct kvp_setup and receives one struct kvp_setup_reply carrying, by
 * SCM_RIGHTS, three descriptors: a sealed memfd holding its submission ring
 * (SQ), completion ring (CQ) and data arena, the SQ doorbell eventfd (client
 * writes it to wake the daemon) and the CQ eventfd (the daemon writes it to
 * wake the client). The socket stays open; its hang-up ends the session.
 *
 * Rings follow io_uring's protocol: the producer writes entries, then
 * publishes its tail with a release store; the consumer reads the tail with an
 * acquire load, consumes, then publishes its head with a release store. Offsets
 * of every ring field come back in the setup reply, so the layout can change
 * without breaking clients that use them. See docs/protocol.md.
 *
 * Every reserved field must be zero, else the request fails with -EINVAL.
 */
#ifndef _UAPI_KVPOOL_H
#define _UAPI_KVPOOL_H

#include <linux/types.h>

#define KVP_MAGIC 0x6b76706cu /* "kvpl" */
#define KVP_ABI_VERSION 1
#define KVP_DEFAULT_SOCKET "/run/kvpool/kvpool.sock"

#define KVP_NAME_MAX 32     /* pool and namespace names, NUL included */
#define KVP_MAX_ENTRIES 4096 /* ring entries, a power of two */
#define KVP_MAX_ARENA (1ull << 30)
#define KVP_MAX_GROUPS 16

/* Feature bits, agreed at setup: reply.features = request.features & supported. */
#define KVP_FEAT_SPIN_WAKEUP (1ull << 0) /* NEED_WAKEUP flags on both rings */
#define KVP_FEAT_ADMIN (1ull << 1)       /* admin opcodes (granted to root / the daemon's uid) */
#define KVP_FEAT_STATS_PAGE (1ull << 2)  /* a 4th descriptor: the read-only stats page */
#define KVP_FEATURES_SUPPORTED (KVP_FEAT_SPIN_WAKEUP | KVP_FEAT_ADMIN | KVP_FEAT_STATS_PAGE)

struct kvp_setup {
	__u32 magic;           /* KVP_MAGIC */
	__u32 abi_version;     /* KVP_ABI_VERSION */
	__u32 sq_entries;      /* power of two, 1..KVP_MAX_ENTRIES */
	__u32 cq_entries;      /* power of two >= sq_entries, or 0 for 2 * sq_entries */
	__u64 arena_bytes;     /* data arena size, rounded up to pages; <= KVP_MAX_ARENA */
	__u64 features;        /* KVP_FEAT_* wanted */
	char pool[KVP_NAME_MAX];      /* pool to attach to; "" for none (admin, stats) */
	char namespace_[KVP_NAME_MAX]; /* cache namespace; "" is the shared default */
	__u64 resv[4];
};

struct kvp_sq_offsets {
	__u32 head;    /* __u32, written by the daemon */
	__u32 tail;    /* __u32, written by the client */
	__u32 flags;   /* __u32, KVP_SQ_*, written by the daemon */
	__u32 entries; /* __u32, ring size */
	__u32 sqes;    /* struct kvp_sqe[entries] */
	__u32 resv[3];
};

struct kvp_cq_offsets {
	__u32 head;    /* written by the client */
	__u32 tail;    /* written by the daemon */
	__u32 flags;   /* KVP_CQ_*, written by the client */
	__u32 entries;
	__u32 cqes;    /* struct kvp_cqe[entries] */
	__u32 resv[3];
};

/* SQ flags (daemon -> client). */
#define KVP_SQ_NEED_WAKEUP (1u << 0) /* the daemon sleeps: write the SQ doorbell */
/* CQ flags (client -> daemon). */
#define KVP_CQ_NEED_WAKEUP (1u << 0) /* the client sleeps: write the CQ eventfd */

struct kvp_pool_info {
	__u32 num_blocks;
	__u32 block_size;
	__u32 num_groups;
	__u32 max_len;
	__u8 group_kind[KVP_MAX_GROUPS]; /* KVP_KIND_* */
	__u32 group_param[KVP_MAX_GROUPS];
	__u32 kv_heads;       /* KV geometry; 0 when the pool holds no KV */
	__u32 head_dim;
	__u32 dtype;          /* KVP_DTYPE_* */
	__u32 layers_per_group;
};

struct kvp_setup_reply {
	__s32 result;          /* 0, or -errno (no descriptors come then) */
	__u32 client_id;
	__u64 features;        /* agreed KVP_FEAT_* */
	__u64 mmap_bytes;      /* size of the memfd; map it all, shared */
	__u32 sq_entries;
	__u32 cq_entries;
	struct kvp_sq_offsets sq_off;
	struct kvp_cq_offsets cq_off;
	__u64 arena_off;       /* offset of the data arena in the memfd */
	__u64 arena_bytes;
	struct kvp_pool_info pool; /* zero when attached to none */
	__u64 stats_bytes;     /* with KVP_FEAT_STATS_PAGE: size of the stats page */
	__u64 resv[3];
};

/* Descriptors passed with the reply, in this order (the stats page only when agreed). */
enum { KVP_FD_MEM, KVP_FD_SQ_DOORBELL, KVP_FD_CQ_EVENT, KVP_FD_STATS, KVP_NUM_FDS };

enum kvp_opcode {
	KVP_OP_NOP = 0,
	KVP_OP_SEQ_OPEN,      /* addr: tokens (__u32[len]), then salt (arg2 bytes); arg1: prefix
			       * if KVP_OPEN_PREFIX. cqe.aux: the handle */
	KVP_OP_SEQ_CLOSE,     /* handle: free the blocks and forget the sequence */
	KVP_OP_APPEND_TOKENS, /* handle, addr: tokens (__u32[len]) */
	KVP_OP_LOOKUP,        /* handle; out: struct kvp_block_lists. res: hit tokens */
	KVP_OP_ALLOC,         /* handle, len: new tokens, arg1: lookahead, KVP_ALLOC_USE_CACHE;
			       * out (optional): the new blocks as struct kvp_block_lists.
			       * res: 0 or -ENOSPC; cqe.aux: hit tokens */
	KVP_OP_COMMIT,        /* handle, len: computed tokens (publishes, drops) */
	KVP_OP_FREE,          /* handle: release the blocks, keep the sequence */
	KVP_OP_GET_TABLE,     /* handle; out: struct kvp_block_lists of the tables */
	KVP_OP_POOL_STATS,    /* out: struct kvp_pool_stats of the attached pool */
	KVP_OP_STATS,         /* out: struct kvp_stats_header, pools, clients */
	KVP_OP_ATTACH,        /* addr: pool name (len bytes); only with no sequence open */
	KVP_OP_WRITE_KV,      /* handle, arg1: first position, len: tokens, arg2: KVP_KV_SEL;
			       * addr: K then V, each [len][kv_heads][head_dim] in the pool dtype.
			       * Only positions >= computed (-EPERM) and < allocated slots (-EINVAL) */
	KVP_OP_READ_KV,       /* as WRITE_KV, out_addr: K then V. -ENODATA: a position not present */
	KVP_OP_ATTEND,        /* addr: struct kvp_attend (len bytes). -ENODATA: the mask needs a
			       * position that was dropped or never written */
	/* Admin (KVP_FEAT_ADMIN): */
	KVP_OP_POOL_CREATE = 64, /* addr: struct kvp_pool_params */
	KVP_OP_POOL_DESTROY,  /* addr: pool name (len bytes); -EBUSY while in use by others */
	KVP_OP_EVICT,         /* addr: block ids (__u32[len]) of the attached pool. res: evicted */
	KVP_OP_RESET,         /* the attached pool's prefix cache; -EBUSY while blocks are used */
	KVP_OP_DUMP_FREEQ,    /* out: __u32 ids, head first. res: queue length */
	KVP_OP_CHECK,         /* attached pool's invariants: 0 or -EUCLEAN; out: reason text */
	KVP_OP_LAST,
};

/* WRITE_KV / READ_KV: sqe.arg2 names the group and the layer within it. */
#define KVP_KV_SEL(group, layer) ((__u32)(group) | (__u32)(layer) << 16)

/* sqe.op_flags */
#define KVP_OPEN_PREFIX (1u << 0)     /* SEQ_OPEN: arg1 is the R-SWA prefix length */
#define KVP_ALLOC_USE_CACHE (1u << 0) /* ALLOC: look the prefix cache up first */

/* One request: 64 bytes, copied out of the ring before anything reads it. */
struct kvp_sqe {
	__u8 opcode;      /* KVP_OP_* */
	__u8 flags;       /* reserved, 0 */
	__u16 resv1;
	__u32 len;        /* count (tokens, ids, bytes) */
	__u64 handle;     /* sequence handle from SEQ_OPEN */
	__u64 user_data;  /* returned unchanged in the completion */
	__u64 addr;       /* arena offset of the input */
	__u64 out_addr;   /* arena offset of the output */
	__u32 out_len;    /* bytes available at out_addr */
	__u32 op_flags;   /* per-opcode flags */
	__u32 arg1;
	__u32 arg2;
	__u64 resv2;
};

/* cqe.flags */
#define KVP_CQE_F_OVERFLOW (1u << 0) /* ALLOC succeeded but its id lists did not fit in out_len */

/* One completion: 32 bytes. */
struct kvp_cqe {
	__u64 user_data;
	__s32 res;        /* >= 0, or -errno */
	__u32 flags;      /* KVP_CQE_F_* */
	__u64 aux;        /* second result, per opcode */
	__u64 resv;
};

/* Per-group block ids: counts[num_groups], then each group's ids in order. */
struct kvp_block_lists {
	__u32 num_groups;
	__u32 counts[KVP_MAX_GROUPS];
	__u32 ids[];      /* sum(counts) entries; 0 = null block */
};

/* One sequence's queries in an ATTEND: positions first_pos .. first_pos + count - 1. */
struct kvp_attend_seq {
	__u64 handle;
	__u32 first_pos;
	__u32 count;
	__u64 q_off;      /* arena: Q [count][q_heads][head_dim] */
	__u64 out_off;    /* arena: the output, same shape and dtype as Q */
};

#define KVP_ATTEND_Q_F32 (1u << 0) /* Q and the output are f32, not the pool dtype */

/*
 * ATTEND input: causal attention of each query over its sequence's KV in one
 * group and layer, with the group's mask. Many sequences per entry make a
 * decode step one request per layer.
 */
struct kvp_attend {
	__u16 group;
	__u16 layer;
	__u32 num_seqs;
	__u32 q_heads;    /* a multiple of the pool's kv_heads */
	__u32 flags;      /* KVP_ATTEND_* */
	float scale;      /* multiplies q.k */
	float softcap;    /* > 0: logits become softcap * tanh(logit / softcap) */
	__u64 resv;
	struct kvp_attend_seq seqs[];
};

struct kvp_pool_stats {
	__u32 blocks_total; /* N, null block included */
	__u32 blocks_free;
	__u32 blocks_used;
	__u32 blocks_cached;
};

enum kvp_kind { KVP_KIND_FULL, KVP_KIND_SWA, KVP_KIND_RSWA, KVP_KIND_CHUNKED, KVP_KIND_CYCLIC };
enum kvp_dtype { KVP_DTYPE_F32, KVP_DTYPE_F16, KVP_DTYPE_BF16 };

struct kvp_pool_params {
	char name[KVP_NAME_MAX];
	__u32 num_blocks;
	__u32 block_size;
	__u8 caching;          /* 1 = on */
	__u8 free_order;       /* 0 split, 1 append */
	__u8 publish;          /* 0 commit, 1 alloc */
	__u8 num_groups;
	__u32 max_len;
	__u32 max_step_tokens;
	__u32 kv_heads;        /* KV geometry (the data path); 0: no KV memory, allocation only */
	__u32 head_dim;
	__u32 dtype;           /* KVP_DTYPE_* */
	__u32 layers_per_group;
	__u8 group_kind[KVP_MAX_GROUPS];
	__u32 group_param[KVP_MAX_GROUPS];
	__u32 resv0;
	__u64 resv[2];
};

struct kvp_stats_header {
	__u32 num_pools;
	__u32 num_clients;
	__u64 clients_connected;    /* since start */
	__u64 clients_disconnected;
	__u64 clients_killed;       /* hung up with sequences open */
	/* then struct kvp_pool_entry[num_pools], struct kvp_client_entry[num_clients] */
};

struct kvp_pool_entry {
	char name[KVP_NAME_MAX];
	__u32 block_size;
	struct kvp_pool_stats stats;
	__u32 clients;
	__u32 sequences;
	__u32 resv;
};

struct kvp_client_entry {
	__u32 client_id;
	__s32 pid;
	__u32 uid;
	__u32 sequences;
	char namespace_[KVP_NAME_MAX];
	char pool[KVP_NAME_MAX];
	__u64 blocks_held;   /* distinct blocks its sequences hold */
	__u64 ops;           /* requests completed */
};

/*
 * The stats page: a sealed memfd (F_SEAL_FUTURE_WRITE: readers can only map it
 * read-only) where the daemon keeps its counters as it serves, so reading them
 * never costs the daemon anything. Writes are bracketed by a seqlock: read
 * seq (retry while odd), copy what you need, read seq again, retry if it moved.
 */
#define KVP_STATS_MAGIC 0x6b767374u /* "kvst" */
#define KVP_STATS_VERSION 1
#define KVP_HIST_BUCKETS 40  /* bucket b: latencies in [2^b, 2^(b+1)) ns (b = 0: also 0) */
#define KVP_STATS_OPS 256    /* per-opcode entries, indexed by opcode */

struct kvp_stats_op {
	__u64 count;
	__u64 errors;       /* completions with res < 0 */
	__u64 sum_ns;
	__u64 hist[KVP_HIST_BUCKETS];
};

struct kvp_stats_group {
	__u32 kind;         /* KVP_KIND_* */
	__u32 param;
	__u64 blocks_held;  /* blocks in use now that this group took */
	__u64 window_drops; /* blocks its windows dropped, total */
	__u64 tokens_held;  /* fragmentation: token slots of the blocks sequences hold... */
	__u64 tokens_needed;/* ...and the tokens their masks need now (refreshed every second) */
};

struct kvp_stats_pool {
	__u32 in_use;       /* 0: an unused entry */
	__u32 block_size;
	char name[KVP_NAME_MAX];
	__u32 blocks_total; /* N, null block included */
	__u32 blocks_free;
	__u32 blocks_used;
	__u32 blocks_cached;
	__u32 num_groups;
	__u32 clients;
	__u32 sequences;
	__u32 resv;
	__u64 prefix_queries_tokens; /* at admission: ALLOC with the prefix cache */
	__u64 prefix_hits_tokens;
	__u64 lookup_queries_tokens; /* advisory LOOKUPs */
	__u64 lookup_hits_tokens;
	__u64 evictions_reuse;       /* a cached free block taken for new data */
	__u64 evictions_evict;       /* admin EVICT */
	__u64 evictions_reset;       /* admin RESET */
	__u64 nospace;               /* ALLOCs refused for want of blocks */
	struct kvp_stats_group groups[KVP_MAX_GROUPS];
};

struct kvp_stats_client {
	__u32 in_use;
	__u32 client_id;
	__s32 pid;
	__u32 uid;
	char namespace_[KVP_NAME_MAX];
	char pool[KVP_NAME_MAX];
	__u32 sequences;
	__u32 resv;
	__u64 blocks_held;  /* distinct blocks its sequences hold (the charging rule) */
	__u64 ops;          /* requests completed */
};

struct kvp_stats_page {
	__u32 magic;        /* KVP_STATS_MAGIC */
	__u32 version;
	__u32 seq;          /* seqlock: odd while the daemon writes */
	__u32 max_pools;
	__u32 max_clients;
	__u32 hist_buckets;
	__u64 page_bytes;
	__u64 pools_off;    /* struct kvp_stats_pool[max_pools] */
	__u64 clients_off;  /* struct kvp_stats_client[max_clients] */
	__u64 ops_off;      /* struct kvp_stats_op[KVP_STATS_OPS] */
	__u64 start_realtime_ns;
	__u64 update_ns;    /* CLOCK_MONOTONIC of the last update */
	__u64 clients_connected;
	__u64 clients_disconnected;
	__u64 clients_killed; /* hung up with sequences open */
	__u64 resv[5];
};

_Static_assert(sizeof(struct kvp_setup) == 128, "kvp_setup");
_Static_assert(sizeof(struct kvp_sq_offsets) == 32, "kvp_sq_offsets");
_Static_assert(sizeof(struct kvp_cq_offsets) == 32, "kvp_cq_offsets");
_Static_assert(sizeof(struct kvp_pool_info) == 112, "kvp_pool_info");
_Static_assert(sizeof(struct kvp_setup_reply) == 256, "kvp_setup_reply");
_Static_assert(sizeof(struct kvp_sqe) == 64, "kvp_sqe");
_Static_assert(__builtin_offsetof(struct kvp_sqe, handle) == 8, "sqe.handle");
_Static_assert(__builtin_offsetof(struct kvp_sqe, user_data) == 16, "sqe.user_data");
_Static_assert(__builtin_offsetof(struct kvp_sqe, addr) == 24, "sqe.addr");
_Static_assert(__builtin_offsetof(struct kvp_sqe, out_addr) == 32, "sqe.out_addr");
_Static_assert(__builtin_offsetof(struct kvp_sqe, out_len) == 40, "sqe.out_len");
_Static_assert(__builtin_offsetof(struct kvp_sqe, arg1) == 48, "sqe.arg1");
_Static_assert(__builtin_offsetof(struct kvp_sqe, resv2) == 56, "sqe.resv2");
_Static_assert(sizeof(struct kvp_cqe) == 32, "kvp_cqe");
_Static_assert(__builtin_offsetof(struct kvp_cqe, res) == 8, "cqe.res");
_Static_assert(__builtin_offsetof(struct kvp_cqe, aux) == 16, "cqe.aux");
_Static_assert(sizeof(struct kvp_block_lists) == 68, "kvp_block_lists");
_Static_assert(sizeof(struct kvp_pool_stats) == 16, "kvp_pool_stats");
_Static_assert(sizeof(struct kvp_attend_seq) == 32, "kvp_attend_seq");
_Static_assert(sizeof(struct kvp_attend) == 32, "kvp_attend");
_Static_assert(sizeof(struct kvp_pool_params) == 168, "kvp_pool_params");
_Static_assert(sizeof(struct kvp_stats_header) == 32, "kvp_stats_header");
_Static_assert(sizeof(struct kvp_pool_entry) == 64, "kvp_pool_entry");
_Static_assert(sizeof(struct kvp_client_entry) == 96, "kvp_client_entry");
_Static_assert(sizeof(struct kvp_stats_op) == 344, "kvp_stats_op");
_Static_assert(sizeof(struct kvp_stats_group) == 40, "kvp_stats_group");
_Static_assert(sizeof(struct kvp_stats_pool) == 776, "kvp_stats_pool");
_Static_assert(sizeof(struct kvp_stats_client) == 104, "kvp_stats_client");
_Static_assert(sizeof(struct kvp_stats_page) == 136, "kvp_stats_page");

#endif
