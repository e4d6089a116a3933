/* SPDX-License-Identifier: MIT */
/*
 * The binding's C side (module kvpool._kvpool): its types, module state and
 * the helpers they share. Built against the stable ABI (Py_LIMITED_API 3.11,
 * set by the Makefile), so one build loads under every CPython from 3.11 on.
 *
 * libkvpool is not thread-safe: every call on a connection holds the
 * Client's lock, and drops the GIL while it waits for the daemon.
 */
#ifndef KVPOOL_PY_H
#define KVPOOL_PY_H

#include <Python.h>
#include <errno.h>
#include <pythread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "libkvpool.h"

/*
 * The SQ a Client asks for: a decode step of 256 sequences' ALLOC and COMMIT in one
 * submission (the CQ is twice as large). A Batch keeps at most this many in flight.
 */
#define KVPY_SQ_ENTRIES 512

/* What the module owns: its types and exception classes, numpy's and json's entry points. */
struct kvpy_state {
	PyTypeObject *client_type, *sequence_type, *batch_type, *mapping_type, *region_type;
	PyTypeObject *pool_info_type, *lookup_type;
	PyObject *error, *no_space, *quota_exceeded, *no_data, *permission_denied, *not_found,
		*timeout, *disconnected, *batch_error;
	PyObject *np_empty;   /* numpy.empty, imported at first use */
	PyObject *np_ndarray;
	PyObject *json_loads; /* json.loads, likewise */
};

typedef struct {
	PyObject_HEAD
	struct kvpy_state *st;
	struct kvp_client *c; /* NULL once closed */
	PyThread_type_lock lock;
	PyObject *pool_name;  /* str, or None when attached to none */
	uint64_t arena_bytes;
	uint64_t drops[KVP_LOOKUPS_MAX]; /* lookups let go while out: dropped at the next call */
	unsigned ndrops;
	uint32_t epoch;       /* connections made: reconnect() adds one */
	/* What the connection was made with, for reconnect() */
	char *socket_path;    /* NULL: the default */
	char namespace_[KVP_NAME_MAX];
	bool admin;
	unsigned timeout_ms, spin_us;
	unsigned long long arena;
} ClientObject;

typedef struct {
	PyObject_HEAD
	ClientObject *client;
	uint64_t handle;
	uint32_t epoch;       /* its client's connection: a handle means nothing on another */
	bool closed;
} SequenceObject;

/* A new instance of one of the module's types (heap types: no static tp_alloc to call). */
static inline PyObject *kvpy_alloc(PyTypeObject *type)
{
	allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);

	return alloc(type, 0);
}

/* The end of a dealloc: free the object and drop its reference to its heap type. */
static inline void kvpy_free(void *obj)
{
	PyTypeObject *type = Py_TYPE((PyObject *)obj);
	freefunc free_obj = (freefunc)PyType_GetSlot(type, Py_tp_free);

	free_obj(obj);
	Py_DECREF(type);
}

/* Py_SETREF, which the limited API lacks: replace *slot, then drop the old value. */
#define KVPY_SETREF(slot, value)                                                           \
	do {                                                                               \
		PyObject *old_ = (PyObject *)(slot);                                       \
		(slot) = (value);                                                          \
		Py_XDECREF(old_);                                                          \
	} while (0)

/* sequence.c: block lists (LOOKUP's, ALLOC's, GET_TABLE's) as a list of id lists per group. */
PyObject *kvpy_lists_to_python(const struct kvp_block_lists *lists);

/* _kvpool.c: errors. */
/* A kvpool.Error (the subclass @err, a -errno, calls for) whose text names @what and @why. */
PyObject *kvpy_error_new(struct kvpy_state *st, int err, const char *what, const char *why);
/* Raises it; returns NULL for the caller to pass on. */
PyObject *kvpy_raise(struct kvpy_state *st, int err, const char *what, const char *why);
/* The same with the class given: kvpool.Error itself where the errno would mislead. */
PyObject *kvpy_error_new_as(PyObject *cls, int err, const char *what, const char *why);
PyObject *kvpy_raise_as(PyObject *cls, int err, const char *what, const char *why);
/* module.name, imported at first use into *slot (the module state's); NULL with an error. */
PyObject *kvpy_import_attr(PyObject **slot, const char *module, const char *name);
/* KVP_DTYPE_* as PoolInfo and PoolMap say it: "f32" "f16" "bf16". */
const char *kvpy_dtype_label(uint32_t kvp_dtype);
/* PyArg's "O&" converter for a uint32_t: an int (or __index__) in 0..2**32-1, else ValueError. */
int kvpy_u32(PyObject *obj, void *out);
/* The attached pool as a kvpool.PoolInfo, None when attached to none. */
PyObject *kvpy_pool_info(ClientObject *self);

/* client.c */
extern PyType_Spec kvpy_client_spec;
/* Takes the connection's lock (the GIL dropped while another thread holds it); -1 with
 * kvpool.Disconnected raised when the client is closed. */
int kvpy_lock(ClientObject *self);
void kvpy_unlock(ClientObject *self);
const struct kvp_pool_info *kvpy_pool(ClientObject *self); /* NULL (ValueError) without KV */

/*
 * Runs @call, a libkvpool call on self->c, under the lock with the GIL dropped, its result
 * in @ret; INT32_MIN when the lock could not be had (an exception is raised then).
 */
#define KVPY_LOCKED_CALL(self, ret, call)                                                  \
	do {                                                                               \
		if (kvpy_lock(self) < 0) {                                                 \
			ret = INT32_MIN;                                                   \
			break;                                                             \
		}                                                                          \
		Py_BEGIN_ALLOW_THREADS ret = (call);                                       \
		Py_END_ALLOW_THREADS kvpy_unlock(self);                                    \
	} while (0)

/* pool_create.c: Client.create_pool(). */
PyObject *kvpy_create_pool(ClientObject *self, PyObject *args, PyObject *kwds);

/* sequence.c */
extern PyType_Spec kvpy_sequence_spec;
PyObject *kvpy_sequence_new(ClientObject *client, uint64_t handle);
/* The handle of @obj, which must be an open Sequence of @client; -1 with an exception. */
int kvpy_sequence_handle(ClientObject *client, PyObject *obj, uint64_t *handle);

/* arrays.c: arrays in (buffer protocol or __dlpack__, CPU, C-contiguous) and out (numpy). */
enum kvpy_dtype { KVPY_F32, KVPY_F16, KVPY_BF16, KVPY_OTHER };

struct kvpy_array {
	const void *data;
	int ndim;
	Py_ssize_t shape[4];
	enum kvpy_dtype dtype;
	Py_buffer view; /* view.obj set: a buffer to release */
	void *dl;       /* a DLManagedTensor to hand back */
};

enum kvpy_dtype kvpy_pool_dtype(uint32_t kvp_dtype);
const char *kvpy_dtype_name(enum kvpy_dtype t);  /* for messages */
const char *kvpy_numpy_name(enum kvpy_dtype t); /* numpy's: bf16 is "uint16" */
/* @obj as [n][heads][dim] of @dtype (n < 0: any); ValueError naming @what otherwise. */
int kvpy_array_get(PyObject *obj, const char *what, Py_ssize_t n, Py_ssize_t heads,
		   Py_ssize_t dim, enum kvpy_dtype dtype, struct kvpy_array *a);
void kvpy_array_release(struct kvpy_array *a);
size_t kvpy_array_bytes(const struct kvpy_array *a);
/* A new numpy array [n][heads][dim] (bf16 as uint16) and where its data lies. */
PyObject *kvpy_array_new(struct kvpy_state *st, enum kvpy_dtype dtype, Py_ssize_t n,
			 Py_ssize_t heads, Py_ssize_t dim, void **data);
/* Token ids from a list, any iterable of ints, or a buffer of integers; PyMem_Free them. */
int kvpy_tokens(PyObject *obj, uint32_t **tokens, uint32_t *n);

/* attend.c: ATTEND's arguments (group, layer, items [(seq, q, first)], scale, softcap). */
struct kvpy_attend_call {
	uint32_t group, layer, q_heads, nseqs;
	float scale, softcap;
	struct kvp_attend_req *reqs; /* [nseqs], q and out pointing into the arrays below */
	struct kvpy_array *q;        /* [nseqs], float32 */
	PyObject *outs;              /* list of numpy float32 arrays, q's shapes */
};
int kvpy_attend_parse(ClientObject *client, PyObject *args, PyObject *kwds,
		      struct kvpy_attend_call *a);
void kvpy_attend_release(struct kvpy_attend_call *a);
/* The same for one sequence's queries (Sequence.attend's arguments). */
int kvpy_attend_parse_one(ClientObject *client, PyObject *seq, unsigned group, unsigned layer,
			  PyObject *q, PyObject *first, double scale, double softcap,
			  struct kvpy_attend_call *a);
/* Runs a parsed ATTEND and releases it: the list of outputs, in the items' order. */
PyObject *kvpy_attend_run(ClientObject *client, struct kvpy_attend_call *a);
/* Client.attend: parse, then run. */
PyObject *kvpy_attend(ClientObject *client, PyObject *args, PyObject *kwds);

/* sequence.c: WRITE_KV's arguments checked: group and layer, K and V of the pool's geometry. */
int kvpy_kv_arrays(ClientObject *client, unsigned group, unsigned layer, PyObject *k_obj,
		   PyObject *v_obj, struct kvpy_array *k, struct kvpy_array *v);

/* lookup.c: kvpool.Lookup, a LOOKUP out (libkvpool's ticket). */
extern PyType_Spec kvpy_lookup_spec;
PyObject *kvpy_lookup_new(SequenceObject *seq, uint64_t ticket);

static inline uint64_t kvpy_monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* batch.c */
extern PyType_Spec kvpy_batch_spec;
PyObject *kvpy_batch_new(ClientObject *client);

/* poolmap.c */
extern PyType_Spec kvpy_mapping_spec, kvpy_region_spec;
PyObject *kvpy_map(ClientObject *client);

#endif
