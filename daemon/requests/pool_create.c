/* SPDX-License-Identifier: MIT */
/*
 * KVP_OP_POOL_CREATE: v1 (its size in len), v2, or v3 and its text of pool
 * keys; v1 is a host pool in the default layout, open to every namespace. The
 * request's bytes are the client's: copied out of the arena before they are
 * read. The pool is built on a worker; the request completes when it is there.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "requests/requests.h"

/*
 * POOL_CREATE v3's keys applied over its v2 (@src: the request's @len bytes in
 * the arena, v3 and the text). The text is copied out of the arena first: the
 * client may change it while it is read.
 */
static int pool_keys(struct kvpd_pool_spec *spec, const uint8_t *src, uint32_t len,
		     char *why, size_t why_len)
{
	struct kvp_pool_params_v3 v3;
	char *text;
	int ret;

	memcpy(&v3, src, sizeof(v3));
	if (v3.resv0 || v3.resv[0] || v3.resv[1] || v3.resv[2])
		return kvpd_refuse(why, why_len, -EINVAL, "kvp_pool_params_v3: reserved fields "
				   "must be zero");
	if (v3.keys_len > KVP_POOL_KEYS_MAX || len != sizeof(v3) + v3.keys_len)
		return kvpd_refuse(why, why_len, -EINVAL, "len %u: must be %zu + keys_len (%u, at "
				   "most %u)", len, sizeof(v3), v3.keys_len, KVP_POOL_KEYS_MAX);
	spec->v2 = v3.v2;
	text = malloc((size_t)v3.keys_len + 1);
	if (!text)
		return -ENOMEM;
	memcpy(text, src + sizeof(v3), v3.keys_len);
	text[v3.keys_len] = '\0';
	ret = kvpd_pool_keys_apply(spec, text, v3.keys_len, why, why_len);
	free(text);
	return ret;
}

int kvpd_pool_create_request(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
			     struct kvp_cqe *cqe)
{
	struct kvpd_pool_spec spec = { 0 };
	struct kvp_pool_params_v2 *params = &spec.v2;
	struct kvpd_pool_owner owner = { .id = c->gen, .uid = c->uid };
	struct kvpd_pool *pool;
	char why[KVP_REASON_MAX] = "";
	const void *src = kvpd_arena_range(c, sqe->addr, sqe->len);
	int ret;

	if (!src || (sqe->len != sizeof(params->v1) && sqe->len != sizeof(*params) &&
		     sqe->len < sizeof(struct kvp_pool_params_v3))) {
		snprintf(why, sizeof(why), "len %u: must be %zu (v1), %zu (v2) or %zu and keys (v3) "
			 "inside the arena", sqe->len, sizeof(params->v1), sizeof(*params),
			 sizeof(struct kvp_pool_params_v3));
		kvpd_client_reason(c, sqe->out_addr, sqe->out_len, why, cqe);
		return -EINVAL;
	}
	if (sqe->len >= sizeof(struct kvp_pool_params_v3)) {
		ret = pool_keys(&spec, src, sqe->len, why, sizeof(why));
		if (ret) {
			kvpd_client_reason(c, sqe->out_addr, sqe->out_len, why, cqe);
			return ret;
		}
	} else {
		memcpy(params, src, sqe->len);
	}
	ret = kvpd_pool_prepare(d, &spec, sqe->op_flags & KVP_POOL_OWNED ? &owner : NULL, &pool,
				why, sizeof(why));
	if (ret) {
		kvpd_client_reason(c, sqe->out_addr, sqe->out_len, why, cqe);
		return ret;
	}
	/* Built on a worker (seconds for millions of blocks): completed when it is there. */
	ret = kvpd_pool_build_start(d, c, sqe, pool);
	if (ret)
		kvpd_pool_discard(d, pool);
	return ret ?: KVPD_LATER;
}
