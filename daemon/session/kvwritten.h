/* SPDX-License-Identifier: MIT */
/* The record of KV written past computed (kvwritten.c), as the data path uses it. */
#ifndef KVPOOL_KVWRITTEN_H
#define KVPOOL_KVWRITTEN_H

#include <stdbool.h>
#include <stdint.h>

struct kvpd_seq_kv;

/* Nothing written yet; NULL when out of memory. */
struct kvpd_seq_kv *kvpd_seq_kv_new(uint32_t ngroups, uint32_t layers);
void kvpd_seq_kv_free(struct kvpd_seq_kv *kv, uint32_t ngroups);
/* Nothing written any more (the sequence was freed and its slot may be used again). */
void kvpd_seq_kv_reset(struct kvpd_seq_kv *kv, uint32_t ngroups);
/* The sequence's computed count is now @computed: what it passed needs no record. */
void kvpd_seq_kv_rebase(struct kvpd_seq_kv *kv, uint32_t ngroups, uint32_t computed);
/* Every position of [lo, hi) (none below the computed count) written. */
bool kvpd_seq_kv_written(const struct kvpd_seq_kv *kv, uint32_t group, uint32_t layer,
			 uint32_t lo, uint32_t hi);
/* One past the highest position ever written (what a ring's slots last held). */
uint32_t kvpd_seq_kv_high(const struct kvpd_seq_kv *kv, uint32_t group, uint32_t layer);
/* A WRITE_KV of [lo, hi) completed; -ENOMEM when the record cannot grow. */
int kvpd_seq_kv_mark(struct kvpd_seq_kv *kv, uint32_t group, uint32_t layer, uint32_t lo,
		     uint32_t hi);

#endif
