/* SPDX-License-Identifier: MIT */
/* The KV tests' reference (kvref.c): conversions, math and masks of their own. */
#ifndef KVPOOL_TEST_KVREF_H
#define KVPOOL_TEST_KVREF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "harness.h"

#define TOL_F32 1e-5

struct mask {
	uint32_t kind, param, prefix;
};

/* What val() generates a value of. */
enum { WHICH_K, WHICH_V, WHICH_Q };

uint16_t to_f16(float f);
uint16_t to_bf16(float f);
double f16_value(uint16_t h);
double bf16_value(uint16_t h);
size_t dtype_size(uint32_t t);
void store_elem(void *base, uint32_t t, size_t i, float v);
double load_elem(const void *base, uint32_t t, size_t i);
double as_stored(uint32_t t, float v);
double ulp_of(uint32_t t, double r);
double ref_exp(double x);
double ref_tanh(double x);
bool close_rel(double a, double b, double rel);
void self_check(void);
uint64_t mix(uint64_t x);
float unit(uint64_t h);
float val(uint64_t seed, uint32_t which, uint32_t group, uint32_t layer, uint32_t pos, uint32_t head, uint32_t d);
bool sees(const struct mask *m, uint32_t i, uint32_t j);

/* Where a test keeps the K and V rows (doubles) of one sequence, group, layer and kv head. */
struct ref_kv {
	const double *k0;     /* the K row of key position 0 */
	size_t pos_stride;    /* doubles from one position's K row to the next one's */
	size_t v_offset;      /* doubles from a K row to the V row of the same position */
};

/*
 * The reference of query @i under mask @m: softmax(scale q.K^T, soft-capped as
 * s -> softcap tanh(s / softcap) when softcap > 0) V over the keys it sees
 * (at least one), in double; @out gets @hd values.
 */
void ref_attend(const struct mask *m, uint32_t i, const double *q, uint32_t hd, double scale,
		double softcap, const struct ref_kv *kv, double *out);

#endif
