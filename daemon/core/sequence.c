/* SPDX-License-Identifier: MIT */
/*
 * Sequences: their tokens, their block table per group, and the operations that
 * move blocks between them and the pool (vLLM's allocate_slots, cache_blocks,
 * remove_skipped_blocks and free).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static inline void held(struct kvc_seq *seq, uint32_t id, bool gained)
{
	seq->held += gained ? 1 : -1;
	if (seq->pool->hold)
		seq->pool->hold(seq->owner, id, gained);
}

static int reserve_u32(uint32_t **arr, uint32_t *cap, uint64_t need)
{
	uint64_t new_cap = *cap ? *cap : 16;
	uint32_t *p;

	if (need <= *cap)
		return 0;
	while (new_cap < need)
		new_cap *= 2;
	p = realloc(*arr, new_cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = (uint32_t)new_cap;
	return 0;
}

static void link_seq(struct kvc_pool *pool, struct kvc_seq *seq)
{
	seq->link.prev = NULL;
	seq->link.next = pool->seqs.next;
	if (seq->link.next)
		seq->link.next->link.prev = seq;
	pool->seqs.next = seq;
}

static void unlink_seq(struct kvc_pool *pool, struct kvc_seq *seq)
{
	if (seq->link.prev)
		seq->link.prev->link.next = seq->link.next;
	else
		pool->seqs.next = seq->link.next;
	if (seq->link.next)
		seq->link.next->link.prev = seq->link.prev;
}

/* Grows the token array, and the hash array its full blocks will need, together. */
static int reserve_tokens(struct kvc_seq *seq, uint64_t ntokens)
{
	int ret;

	if (ntokens > KVC_MAX_TOKENS)
		return -E2BIG;
	ret = reserve_u32(&seq->tokens, &seq->tokens_cap, ntokens);
	if (ret)
		return ret;
	return kvc_seq_reserve_hashes(seq, (uint32_t)(ntokens / seq->pool->cfg.block_size));
}

int kvc_seq_create(struct kvc_pool *pool, const uint32_t *tokens, uint32_t n,
		   const void *salt, size_t salt_len, int64_t prefix,
		   struct kvc_seq **out)
{
	struct kvc_seq *seq;
	int ret;

	if (prefix < -1 || prefix > (int64_t)n)
		return -EINVAL;
	seq = calloc(1, sizeof(*seq) + pool->cfg.num_groups * sizeof(seq->tables[0]));
	if (!seq)
		return -ENOMEM;
	seq->pool = pool;
	ret = reserve_tokens(seq, n);
	if (ret)
		goto err_free_seq;
	if (n)
		memcpy(seq->tokens, tokens, (size_t)n * sizeof(*tokens));
	seq->ntokens = seq->prompt_tokens = n;
	seq->prefix = prefix < 0 ? n : (uint32_t)prefix;
	kvc_hash_salt(&seq->root, salt, salt_len);
	link_seq(pool, seq);
	*out = seq;
	return 0;

err_free_seq:
	free(seq->tokens);
	free(seq->hashes);
	free(seq);
	return ret;
}

void kvc_seq_set_owner(struct kvc_seq *seq, void *owner)
{
	seq->owner = owner;
}

void kvc_seq_destroy(struct kvc_seq *seq)
{
	if (!seq)
		return;
	kvc_seq_free(seq);
	unlink_seq(seq->pool, seq);
	for (uint32_t g = 0; g < seq->pool->cfg.num_groups; g++)
		free(seq->tables[g].ids);
	free(seq->hashes);
	free(seq->tokens);
	free(seq);
}

int kvc_seq_append(struct kvc_seq *seq, const uint32_t *tokens, uint32_t n)
{
	int ret = reserve_tokens(seq, (uint64_t)seq->ntokens + n);

	if (ret)
		return ret;
	memcpy(seq->tokens + seq->ntokens, tokens, (size_t)n * sizeof(*tokens));
	seq->ntokens += n;
	return 0;
}

/* Replaces positions [first, last) by the null block, last first, as one release. */
static void drop_group(struct kvc_seq *seq, uint32_t g, uint32_t computed)
{
	const struct kvc_group *grp = &seq->pool->groups[g];
	struct kvc_table *t = &seq->tables[g];
	struct kvc_release rel;
	uint32_t first, last;

	kvc_kind(grp->kind)->drop_range(seq, grp, computed, &first, &last);
	if (last > t->len)
		last = t->len;
	kvc_release_begin(seq->pool, &rel);
	/* Everything below a null position was dropped already. */
	for (uint32_t p = last; p-- > first && t->ids[p] != KVC_NULL_BLOCK;) {
		held(seq, t->ids[p], false);
		kvc_release_block(seq->pool, &rel, t->ids[p]);
		t->ids[p] = KVC_NULL_BLOCK;
		seq->pool->counters.dropped[g]++;
	}
}

static void drop_for(struct kvc_seq *seq, uint32_t computed)
{
	for (uint32_t g = 0; g < seq->pool->cfg.num_groups; g++)
		drop_group(seq, g, computed);
}

/* Offers the full blocks below @tokens to the prefix cache, each position once. */
static void publish_upto(struct kvc_seq *seq, uint64_t tokens)
{
	struct kvc_pool *pool = seq->pool;

	if (!pool->cfg.caching)
		return;
	for (uint32_t g = 0; g < pool->cfg.num_groups; g++) {
		const struct kvc_group *grp = &pool->groups[g];
		struct kvc_table *t = &seq->tables[g];
		uint32_t upto = (uint32_t)kvc_min(tokens / pool->cfg.block_size, t->len);

		if (upto <= t->published)
			continue;
		kvc_seq_hash_upto(seq, upto);
		for (uint32_t p = t->published; p < upto; p++)
			if (t->ids[p] != KVC_NULL_BLOCK && kvc_kind(grp->kind)->publishable(seq, grp, p))
				kvc_cache_insert(pool, seq, g, p, t->ids[p]);
		t->published = upto;
	}
}

struct alloc_plan {
	uint32_t hit_blocks;
	uint32_t total;      /* computed tokens once the hit is taken */
	uint32_t slots;      /* slots the sequence will have */
	uint32_t start[KVC_MAX_GROUPS];    /* new sequence: table length before new blocks */
	uint32_t skipped[KVC_MAX_GROUPS];  /* new sequence: hit positions that become null */
	uint32_t take_new[KVC_MAX_GROUPS]; /* blocks popped from the queue */
	uint32_t promote;    /* new sequence: hit positions in the tier, popped too */
	uint32_t promote_ring; /* new sequence: snapshot blocks in the tier, promoted into rings */
	uint32_t copies;     /* new sequence: snapshot blocks to copy into cyclic rings */
	uint64_t take;       /* blocks leaving the queue: popped + touched hit blocks */
};

/* Steps 1 and 2 of allocate_slots, with no side effect but the lookup's scratch. */
static int plan_alloc(struct kvc_seq *seq, const struct kvc_alloc_req *req,
		      struct alloc_plan *plan)
{
	struct kvc_pool *pool = seq->pool;
	uint32_t bs = pool->cfg.block_size;
	uint32_t need;
	int ret;

	if (req->new_tokens == 0 || (req->use_cache && seq->running))
		return -EINVAL;
	if (pool->has_cyclic &&
	    (uint64_t)req->new_tokens + req->lookahead > pool->cfg.max_step_tokens)
		return -EINVAL;
	memset(plan, 0, sizeof(*plan));
	if (req->use_cache) {
		ret = kvc_find_hit(seq, &plan->hit_blocks);
		if (ret)
			return ret;
	}
	plan->total = (uint32_t)kvc_min((uint64_t)seq->computed + (uint64_t)plan->hit_blocks * bs,
					pool->cfg.max_len);
	plan->slots = (uint32_t)kvc_min((uint64_t)plan->total + req->new_tokens + req->lookahead,
					pool->cfg.max_len);
	need = kvc_cdiv(plan->slots, bs);

	for (uint32_t g = 0; g < pool->cfg.num_groups; g++) {
		const struct kvc_group *grp = &pool->groups[g];
		uint32_t group_need = grp->kind == KVC_CYCLIC ? (uint32_t)kvc_min(need, grp->ring_blocks)
							      : need;
		uint32_t have;

		if (seq->running) {
			have = seq->tables[g].len;
		} else if (grp->kind == KVC_CYCLIC) {
			/* A ring starts empty: a hit's snapshot is copied into it, not placed. */
			uint32_t n = plan->hit_blocks ? kvc_snap_blocks(pool, grp, plan->hit_blocks * bs) : 0;

			have = 0;
			for (uint32_t j = 0; j < n; j++) {
				uint32_t id = pool->hit_ids[g][j];

				if (id == KVC_TIER_BLOCK) {
					plan->promote_ring++;
				} else {
					plan->take += pool->blocks[id].ref == 0;
					plan->copies++;
				}
			}
		} else {
			uint32_t sb = kvc_kind(grp->kind)->skipped(grp, plan->total) / bs;

			plan->skipped[g] = sb;
			have = plan->start[g] = (uint32_t)kvc_max(sb, plan->hit_blocks);
			/* Touching a hit block with no other user takes it out of the queue. */
			for (uint32_t p = sb; p < plan->hit_blocks; p++) {
				uint32_t id = pool->hit_ids[g][p];

				if (id == KVC_TIER_BLOCK) {
					plan->promote++;
					plan->take++;
				} else {
					plan->take += id != KVC_NULL_BLOCK && pool->blocks[id].ref == 0;
				}
			}
		}
		plan->take_new[g] = group_need > have ? group_need - have : 0;
		plan->take += plan->take_new[g];
	}
	return 0;
}

int64_t kvc_alloc_cost(struct kvc_seq *seq, const struct kvc_alloc_req *req)
{
	struct alloc_plan plan;
	int ret = plan_alloc(seq, req, &plan);

	return ret ? ret : (int64_t)plan.take;
}

/* The plan as the admission hook sees it (kvc_admit). */
static const struct kvc_admit *admit_of(const struct kvc_seq *seq, const struct alloc_plan *plan,
				       struct kvc_admit *a)
{
	const struct kvc_pool *pool = seq->pool;

	a->popped = plan->promote;
	for (uint32_t g = 0; g < pool->cfg.num_groups; g++) {
		a->popped += plan->take_new[g];
		if (!seq->running && pool->groups[g].kind != KVC_CYCLIC) {
			a->hit_first[g] = plan->skipped[g];
			a->hit_end[g] = plan->hit_blocks > plan->skipped[g] ? plan->hit_blocks : plan->skipped[g];
			a->hit_ids[g] = pool->hit_ids[g];
		}
	}
	return a;
}

static int reserve_tables(struct kvc_seq *seq, const struct alloc_plan *plan)
{
	struct kvc_pool *pool = seq->pool;
	uint32_t promotions = plan->promote + plan->promote_ring;

	if (promotions > pool->promotions_cap) {
		struct kvc_promotion *p = realloc(pool->promotions, promotions * sizeof(*p));

		if (!p)
			return -ENOMEM;
		pool->promotions = p;
		pool->promotions_cap = promotions;
	}
	if (kvc_copies_reserve(pool, plan->copies))
		return -ENOMEM;
	for (uint32_t g = 0; g < seq->pool->cfg.num_groups; g++) {
		struct kvc_table *t = &seq->tables[g];
		uint64_t len = seq->running ? t->len : plan->start[g];
		int ret = reserve_u32(&t->ids, &t->cap, len + plan->take_new[g]);

		if (ret)
			return ret;
	}
	return 0;
}

/*
 * Gives each tier position of the hit a block and caches its key. After every
 * pool hit is touched: a pop must not evict a hit block still in the queue.
 */
static void promote_hit(struct kvc_seq *seq, const struct alloc_plan *plan,
			struct kvc_alloc_res *res)
{
	struct kvc_pool *pool = seq->pool;

	res->promoted = 0;
	res->promoted_from = plan->hit_blocks;
	res->promotions = pool->promotions;
	for (uint32_t g = 0; g < pool->cfg.num_groups && plan->promote; g++) {
		struct kvc_table *t = &seq->tables[g];

		if (pool->groups[g].kind == KVC_CYCLIC)
			continue;
		for (uint32_t p = plan->skipped[g]; p < plan->hit_blocks; p++) {
			uint32_t id;

			if (t->ids[p] != KVC_TIER_BLOCK)
				continue;
			id = t->ids[p] = kvc_queue_pop(pool, g);
			held(seq, id, true);
			kvc_cache_insert(pool, seq, g, p, id);
			pool->promotions[res->promoted++] =
				(struct kvc_promotion){ g, p, id, seq->hashes[p], false };
			if (p < res->promoted_from)
				res->promoted_from = p;
		}
	}
}

/*
 * A new sequence's table starts with its hit: nulls where the window skips,
 * touched blocks after, tier positions marked for promote_hit.
 */
static void place_hit(struct kvc_seq *seq, const struct alloc_plan *plan,
		      struct kvc_alloc_res *res)
{
	struct kvc_pool *pool = seq->pool;

	for (uint32_t g = 0; g < pool->cfg.num_groups; g++) {
		struct kvc_table *t = &seq->tables[g];

		for (uint32_t p = 0; p < plan->start[g]; p++) {
			uint32_t id = KVC_NULL_BLOCK;

			if (p >= plan->skipped[g] && p < plan->hit_blocks)
				id = pool->hit_ids[g][p];
			if (id != KVC_NULL_BLOCK && id != KVC_TIER_BLOCK) {
				kvc_touch(pool, id);
				held(seq, id, true);
			}
			t->ids[p] = id;
		}
		t->len = t->published = plan->start[g];
		if (pool->groups[g].kind == KVC_CYCLIC && plan->hit_blocks)
			kvc_snap_take(seq, g, plan->hit_blocks * pool->cfg.block_size);
	}
	promote_hit(seq, plan, res);
}

int kvc_alloc(struct kvc_seq *seq, const struct kvc_alloc_req *req, struct kvc_alloc_res *res)
{
	struct kvc_pool *pool = seq->pool;
	struct alloc_plan plan;
	int ret;

	pool->ncopies = 0;
	ret = plan_alloc(seq, req, &plan);
	if (ret)
		return ret;
	drop_for(seq, plan.total);
	if (pool->admit) {
		ret = pool->admit(seq->owner, admit_of(seq, &plan, &(struct kvc_admit){ 0 }));
		if (ret) {
			kvc_debug_check(pool);
			return ret;
		}
	}
	if (plan.take > pool->nfree) {
		kvc_debug_check(pool);
		return -ENOSPC;
	}
	/* Only now: the request is known to fit the pool, so the tables' growth is bounded by N. */
	ret = reserve_tables(seq, &plan);
	if (ret)
		return ret;
	res->promoted = 0;
	res->promoted_from = plan.hit_blocks;
	res->promotions = pool->promotions;
	if (!seq->running) {
		place_hit(seq, &plan, res);
		seq->computed = plan.total;
	}
	for (uint32_t g = 0; g < pool->cfg.num_groups; g++) {
		struct kvc_table *t = &seq->tables[g];

		res->first_new[g] = t->len;
		for (uint32_t k = 0; k < plan.take_new[g]; k++) {
			t->ids[t->len] = kvc_queue_pop(pool, g);
			held(seq, t->ids[t->len++], true);
		}
	}
	for (uint32_t g = 0; g < pool->cfg.num_groups && plan.copies + plan.promote_ring; g++)
		if (pool->groups[g].kind == KVC_CYCLIC)
			kvc_snap_fill(seq, g, plan.hit_blocks * pool->cfg.block_size, res);
	res->hit_tokens = plan.hit_blocks * pool->cfg.block_size;
	res->taken = (uint32_t)plan.take;
	seq->running = true;
	if (plan.slots > seq->allocated)
		seq->allocated = plan.slots;
	if (pool->cfg.publish == KVC_PUBLISH_ALLOC)
		publish_upto(seq, kvc_min((uint64_t)plan.total + req->new_tokens, seq->ntokens));
	kvc_debug_check(pool);
	return 0;
}

/* The committed hook told of the hashed blocks whose last token lies in [@from, @to). */
static void tell_committed(struct kvc_seq *seq, uint32_t from, uint32_t to)
{
	struct kvc_pool *pool = seq->pool;
	uint32_t bs = pool->cfg.block_size;

	if (!pool->committed || to / bs <= from / bs)
		return;
	kvc_seq_hash_upto(seq, to / bs);
	for (uint32_t g = 0; g < pool->cfg.num_groups; g++) {
		const struct kvc_table *t = &seq->tables[g];

		for (uint32_t p = from / bs; p < to / bs && p < t->len; p++) {
			const struct kvc_block *b = &pool->blocks[t->ids[p]];

			if (t->ids[p] != KVC_NULL_BLOCK && b->hashed &&
			    !memcmp(&b->hash, &seq->hashes[p], sizeof(b->hash)))
				pool->committed(pool->committed_ctx, g, p, t->ids[p], &seq->hashes[p],
						p ? &seq->hashes[p - 1] : NULL,
						seq->tokens + (size_t)p * bs);
		}
	}
}

int kvc_seq_computed(struct kvc_seq *seq, uint32_t n)
{
	uint32_t from = seq->computed;

	if (n < seq->computed || n > kvc_min(seq->ntokens, seq->allocated))
		return -EINVAL;
	seq->pool->ncopies = 0;
	seq->computed = n;
	/* While the ring still holds them: the next alloc may overwrite them. */
	kvc_snap_make(seq, from, n);
	if (seq->pool->cfg.publish == KVC_PUBLISH_COMMIT)
		publish_upto(seq, n);
	tell_committed(seq, from, n);
	if (seq->pool->cfg.publish == KVC_PUBLISH_COMMIT)
		drop_for(seq, n);
	kvc_debug_check(seq->pool);
	return 0;
}

void kvc_seq_free(struct kvc_seq *seq)
{
	struct kvc_pool *pool = seq->pool;

	for (uint32_t g = 0; g < pool->cfg.num_groups; g++) {
		struct kvc_table *t = &seq->tables[g];
		struct kvc_release rel;

		kvc_release_begin(pool, &rel);
		for (uint32_t p = t->len; p-- > 0;) {
			if (t->ids[p] == KVC_NULL_BLOCK)
				continue;
			held(seq, t->ids[p], false);
			kvc_release_block(pool, &rel, t->ids[p]);
		}
		t->len = t->published = 0;
	}
	seq->running = false;
	seq->computed = seq->allocated = 0;
	kvc_debug_check(pool);
}

int kvc_lookup(struct kvc_seq *seq, struct kvc_hit *hit)
{
	struct kvc_pool *pool = seq->pool;
	uint32_t blocks;
	int ret = kvc_find_hit(seq, &blocks);

	if (ret)
		return ret;
	hit->blocks = blocks;
	hit->tokens = blocks * pool->cfg.block_size;
	for (uint32_t g = 0; g < KVC_MAX_GROUPS; g++) {
		const struct kvc_group *grp = &pool->groups[g];

		hit->ids[g] = g < pool->cfg.num_groups ? pool->hit_ids[g] : NULL;
		hit->nids[g] = g >= pool->cfg.num_groups ? 0 :
			       grp->kind != KVC_CYCLIC ? blocks :
			       blocks ? kvc_snap_blocks(pool, grp, hit->tokens) : 0;
	}
	return 0;
}

void kvc_seq_info(const struct kvc_seq *seq, struct kvc_seq_info *info)
{
	*info = (struct kvc_seq_info){
		.tokens = seq->ntokens,
		.prompt_tokens = seq->prompt_tokens,
		.prefix = seq->prefix,
		.computed = seq->computed,
		.allocated_slots = seq->allocated,
		.blocks_held = seq->held,
		.running = seq->running,
	};
}

const uint32_t *kvc_seq_table(const struct kvc_seq *seq, uint32_t group, uint32_t *len)
{
	*len = group < seq->pool->cfg.num_groups ? seq->tables[group].len : 0;
	return *len ? seq->tables[group].ids : NULL;
}
