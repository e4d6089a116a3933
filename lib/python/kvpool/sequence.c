/* SPDX-License-Identifier: MIT */
/* kvpool.Sequence: one sequence's handle and the calls on it; ATTEND over many sequences. */
#include <errno.h>
#include <string.h>

#include "kvpool_py.h"

PyObject *kvpy_sequence_new(ClientObject *client, uint64_t handle)
{
	PyTypeObject *type = client->st->sequence_type;
	SequenceObject *self = (SequenceObject *)kvpy_alloc(type);

	if (!self)
		return NULL;
	self->client = (ClientObject *)Py_NewRef((PyObject *)client);
	self->handle = handle;
	self->epoch = client->epoch;
	return (PyObject *)self;
}

int kvpy_sequence_handle(ClientObject *client, PyObject *obj, uint64_t *handle)
{
	SequenceObject *seq = (SequenceObject *)obj;

	if (!client->c) {
		kvpy_raise(client->st, -ENOTCONN, "client", "closed");
		return -1;
	}
	if (!PyObject_TypeCheck(obj, client->st->sequence_type)) {
		PyErr_Format(PyExc_ValueError, "not a kvpool.Sequence: %R", (PyObject *)Py_TYPE(obj));
		return -1;
	}
	if (seq->client != client) {
		PyErr_SetString(PyExc_ValueError, "a sequence of another Client");
		return -1;
	}
	if (seq->closed) {
		kvpy_raise(client->st, -EBADF, "sequence", "closed");
		return -1;
	}
	if (seq->epoch != client->epoch) {
		/* Its handle could name another sequence of the new connection. */
		seq->closed = true;
		kvpy_raise(client->st, -ECONNRESET, "sequence",
			   "opened on the connection before reconnect(): gone with it");
		return -1;
	}
	*handle = seq->handle;
	return 0;
}

/* Closing what was not closed: best effort, never waiting for a lock another thread holds. */
static void sequence_dealloc(SequenceObject *self)
{
	ClientObject *client = self->client;

	if (!self->closed && client->c && self->epoch == client->epoch &&
	    PyThread_acquire_lock(client->lock, NOWAIT_LOCK)) {
		if (client->c && self->epoch == client->epoch)
			kvp_seq_close(client->c, self->handle);
		kvpy_unlock(client);
	}
	Py_DECREF(client);
	kvpy_free(self);
}

/* A result of a call on the sequence: None, or the exception raised. */
static PyObject *done(SequenceObject *self, int ret, const char *what)
{
	if (ret == INT32_MIN)
		return NULL;
	if (ret < 0)
		return kvpy_raise(self->client->st, ret, what, NULL);
	Py_RETURN_NONE;
}

static PyObject *sequence_close(SequenceObject *self, PyObject *unused)
{
	int ret;

	(void)unused;
	if (self->closed || !self->client->c || self->epoch != self->client->epoch) {
		self->closed = true; /* gone with its connection */
		Py_RETURN_NONE;
	}
	KVPY_LOCKED_CALL(self->client, ret, kvp_seq_close(self->client->c, self->handle));
	if (ret != INT32_MIN)
		self->closed = true;
	return done(self, ret, "close");
}

static PyObject *sequence_enter(PyObject *self, PyObject *unused)
{
	(void)unused;
	return Py_NewRef(self);
}

static PyObject *sequence_exit(SequenceObject *self, PyObject *args)
{
	(void)args;
	return sequence_close(self, NULL);
}

#define HANDLE_OR_RAISE(self, h)                                                           \
	if (kvpy_sequence_handle((self)->client, (PyObject *)(self), &(h)) < 0)           \
		return NULL

static PyObject *sequence_append(SequenceObject *self, PyObject *tokens_obj)
{
	uint32_t *tokens, n;
	uint64_t h;
	int ret;

	HANDLE_OR_RAISE(self, h);
	if (kvpy_tokens(tokens_obj, &tokens, &n) < 0)
		return NULL;
	KVPY_LOCKED_CALL(self->client, ret, kvp_append(self->client->c, h, tokens, n));
	PyMem_Free(tokens);
	return done(self, ret, "append");
}

static PyObject *sequence_lookup(SequenceObject *self, PyObject *unused)
{
	uint64_t h;
	int ret;

	(void)unused;
	HANDLE_OR_RAISE(self, h);
	KVPY_LOCKED_CALL(self->client, ret, kvp_lookup(self->client->c, h, NULL, 0));
	if (ret < 0)
		return done(self, ret, "lookup");
	return PyLong_FromLong(ret);
}

static PyObject *sequence_lookup_async(SequenceObject *self, PyObject *unused)
{
	uint64_t h, ticket = 0;
	int ret;

	(void)unused;
	HANDLE_OR_RAISE(self, h);
	KVPY_LOCKED_CALL(self->client, ret, kvp_lookup_start(self->client->c, h, &ticket));
	if (ret < 0)
		return done(self, ret, "lookup_async");
	return kvpy_lookup_new(self, ticket);
}

static PyObject *sequence_alloc(SequenceObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "new_tokens", "lookahead", "use_cache", NULL };
	unsigned new_tokens, lookahead = 0;
	int use_cache = 0, ret;
	uint32_t hit = 0;
	uint64_t h;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|O&p:alloc", kwlist, kvpy_u32, &new_tokens,
					 kvpy_u32, &lookahead,
					 &use_cache))
		return NULL;
	HANDLE_OR_RAISE(self, h);
	KVPY_LOCKED_CALL(self->client, ret, kvp_alloc(self->client->c, h, new_tokens, lookahead,
						      use_cache, &hit, NULL, 0));
	if (ret < 0)
		return done(self, ret, "alloc");
	return PyLong_FromUnsignedLong(hit);
}

static PyObject *sequence_commit(SequenceObject *self, PyObject *arg)
{
	uint32_t computed;
	uint64_t h;
	int ret;

	if (!kvpy_u32(arg, &computed))
		return NULL;
	HANDLE_OR_RAISE(self, h);
	KVPY_LOCKED_CALL(self->client, ret, kvp_commit(self->client->c, h, computed));
	return done(self, ret, "commit");
}

static PyObject *sequence_free(SequenceObject *self, PyObject *unused)
{
	uint64_t h;
	int ret;

	(void)unused;
	HANDLE_OR_RAISE(self, h);
	KVPY_LOCKED_CALL(self->client, ret, kvp_free(self->client->c, h));
	return done(self, ret, "free");
}

PyObject *kvpy_lists_to_python(const struct kvp_block_lists *lists)
{
	PyObject *out = PyList_New(0);
	const uint32_t *id = lists->ids;

	for (uint32_t g = 0; out && g < lists->num_groups && g < KVP_MAX_GROUPS; g++) {
		PyObject *ids = PyList_New(lists->counts[g]);

		for (uint32_t i = 0; ids && i < lists->counts[g]; i++)
			PyList_SetItem(ids, i, PyLong_FromUnsignedLong(*id++));
		if (!ids || PyErr_Occurred() || PyList_Append(out, ids) < 0)
			Py_CLEAR(out);
		Py_XDECREF(ids);
	}
	return out;
}

static PyObject *sequence_table(SequenceObject *self, PyObject *unused)
{
	const struct kvp_pool_info *p;
	struct kvp_block_lists *lists;
	PyObject *out = NULL;
	size_t bytes;
	uint64_t h;
	int ret;

	(void)unused;
	HANDLE_OR_RAISE(self, h);
	p = kvp_pool_info(self->client->c);
	/* Every block once per group covers most tables; past that, grow to the arena's half. */
	bytes = sizeof(*lists) + 4 * ((size_t)p->num_blocks * (p->num_groups ?: 1) + 64);
	for (;;) {
		if (bytes > self->client->arena_bytes / 2)
			bytes = self->client->arena_bytes / 2;
		lists = PyMem_Malloc(bytes);
		if (!lists)
			return PyErr_NoMemory();
		KVPY_LOCKED_CALL(self->client, ret, kvp_get_table(self->client->c, h, lists, bytes));
		if (ret != -EOVERFLOW || bytes >= self->client->arena_bytes / 2)
			break;
		PyMem_Free(lists);
		bytes *= 4;
	}
	if (ret >= 0)
		out = kvpy_lists_to_python(lists);
	else
		done(self, ret, "table");
	PyMem_Free(lists);
	return out;
}

/* Rows of K and V that fit the arena at once: a long write or read goes in such chunks. */
/* Bytes of one position's K (or V): kv_heads x head_dim in the pool's dtype. */
static Py_ssize_t row_bytes(const struct kvp_pool_info *p)
{
	return (Py_ssize_t)p->kv_heads * p->head_dim * (p->dtype == KVP_DTYPE_F32 ? 4 : 2);
}

static Py_ssize_t rows_per_call(ClientObject *client, const struct kvp_pool_info *p)
{
	return (Py_ssize_t)(client->arena_bytes / (2 * (uint64_t)row_bytes(p)));
}

/* Group and layer travel as 16 bits each (KVP_KV_SEL). */
static int check_sel(const char *what, unsigned group, unsigned layer)
{
	if (group <= 0xffff && layer <= 0xffff)
		return 0;
	PyErr_Format(PyExc_ValueError, "%s: group %u, layer %u: 0..65535", what, group, layer);
	return -1;
}

int kvpy_kv_arrays(ClientObject *client, unsigned group, unsigned layer, PyObject *k_obj,
		   PyObject *v_obj, struct kvpy_array *k, struct kvpy_array *v)
{
	const struct kvp_pool_info *p;

	if (check_sel("write_kv", group, layer) < 0 || !(p = kvpy_pool(client)) ||
	    kvpy_array_get(k_obj, "k", -1, p->kv_heads, p->head_dim, kvpy_pool_dtype(p->dtype),
			   k) < 0)
		return -1;
	if (kvpy_array_get(v_obj, "v", k->shape[0], p->kv_heads, p->head_dim,
			   kvpy_pool_dtype(p->dtype), v) < 0) {
		kvpy_array_release(k);
		return -1;
	}
	return 0;
}

static PyObject *sequence_write_kv(SequenceObject *self, PyObject *args)
{
	const struct kvp_pool_info *p;
	unsigned group, layer, first;
	PyObject *k_obj, *v_obj;
	struct kvpy_array k, v;
	Py_ssize_t chunk, row;
	uint64_t h;
	int ret = 0;

	if (!PyArg_ParseTuple(args, "O&O&O&OO:write_kv", kvpy_u32, &group, kvpy_u32, &layer,
			      kvpy_u32, &first, &k_obj, &v_obj))
		return NULL;
	HANDLE_OR_RAISE(self, h);
	if (kvpy_kv_arrays(self->client, group, layer, k_obj, v_obj, &k, &v) < 0)
		return NULL;
	p = kvp_pool_info(self->client->c);
	chunk = rows_per_call(self->client, p);
	row = row_bytes(p);
	for (Py_ssize_t at = 0; ret >= 0 && at < k.shape[0]; at += chunk) {
		uint32_t n = (uint32_t)(k.shape[0] - at < chunk ? k.shape[0] - at : chunk);

		KVPY_LOCKED_CALL(self->client, ret,
				 kvp_write_kv(self->client->c, h, group, layer, first + (uint32_t)at, n,
					      (const char *)k.data + at * row,
					      (const char *)v.data + at * row));
	}
	kvpy_array_release(&k);
	kvpy_array_release(&v);
	return done(self, ret, "write_kv");
}

static PyObject *sequence_read_kv(SequenceObject *self, PyObject *args)
{
	const struct kvp_pool_info *p;
	unsigned group, layer, first, n;
	PyObject *k_arr = NULL, *v_arr = NULL;
	void *k, *v;
	Py_ssize_t chunk, row;
	uint64_t h;
	int ret = 0;

	if (!PyArg_ParseTuple(args, "O&O&O&O&:read_kv", kvpy_u32, &group, kvpy_u32, &layer,
			      kvpy_u32, &first, kvpy_u32, &n))
		return NULL;
	if (check_sel("read_kv", group, layer) < 0)
		return NULL;
	HANDLE_OR_RAISE(self, h);
	if (!(p = kvpy_pool(self->client)))
		return NULL;
	if (!n)
		return PyErr_Format(PyExc_ValueError, "read_kv: n must be at least 1");
	k_arr = kvpy_array_new(self->client->st, kvpy_pool_dtype(p->dtype), n, p->kv_heads,
			       p->head_dim, &k);
	v_arr = k_arr ? kvpy_array_new(self->client->st, kvpy_pool_dtype(p->dtype), n,
				       p->kv_heads, p->head_dim, &v) : NULL;
	if (!v_arr)
		goto drop_arrays;
	chunk = rows_per_call(self->client, p);
	row = row_bytes(p);
	for (Py_ssize_t at = 0; ret >= 0 && at < n; at += chunk) {
		uint32_t count = (uint32_t)(n - at < chunk ? n - at : chunk);

		KVPY_LOCKED_CALL(self->client, ret,
				 kvp_read_kv(self->client->c, h, group, layer, first + (uint32_t)at,
					     count, (char *)k + at * row, (char *)v + at * row));
	}
	if (ret < 0) {
		done(self, ret, "read_kv");
		goto drop_arrays;
	}
	return Py_BuildValue("(NN)", k_arr, v_arr);

drop_arrays:
	Py_XDECREF(k_arr);
	Py_XDECREF(v_arr);
	return NULL;
}

static PyObject *sequence_attend(SequenceObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "group", "layer", "q", "first", "scale", "softcap", NULL };
	PyObject *q, *first, *outs, *out = NULL;
	struct kvpy_attend_call a;
	unsigned group, layer;
	double scale, softcap = 0.0;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&O&OOd|d:attend", kwlist, kvpy_u32, &group,
					 kvpy_u32, &layer, &q, &first, &scale, &softcap) ||
	    kvpy_attend_parse_one(self->client, (PyObject *)self, group, layer, q, first, scale,
				  softcap, &a) < 0)
		return NULL;
	outs = kvpy_attend_run(self->client, &a);
	if (outs) {
		out = Py_NewRef(PyList_GetItem(outs, 0));
		Py_DECREF(outs);
	}
	return out;
}

static PyObject *sequence_get_handle(SequenceObject *self, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLongLong(self->handle);
}

static PyObject *sequence_get_closed(SequenceObject *self, void *closure)
{
	(void)closure;
	return PyBool_FromLong(self->closed);
}

static PyMethodDef sequence_methods[] = {
	{ "close", (PyCFunction)sequence_close, METH_NOARGS,
	  "close()\n--\n\nFree the sequence's blocks and forget it (again: nothing)." },
	{ "__enter__", sequence_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)sequence_exit, METH_VARARGS, NULL },
	{ "append", (PyCFunction)sequence_append, METH_O,
	  "append(tokens)\n--\n\nAdd generated tokens to the sequence." },
	{ "lookup", (PyCFunction)sequence_lookup, METH_NOARGS,
	  "lookup()\n--\n\nThe prefix-cache hit, tokens, the sequence would get now (advisory)." },
	{ "lookup_async", (PyCFunction)sequence_lookup_async, METH_NOARGS,
	  "lookup_async()\n--\n\nlookup() without waiting: a kvpool.Lookup, whose done() says\n"
	  "whether the answer came and result() gives it. A pool's cluster tier may take a\n"
	  "network round to answer; meanwhile the sequence answers EBUSY to anything else." },
	{ "alloc", (PyCFunction)(void (*)(void))sequence_alloc, METH_VARARGS | METH_KEYWORDS,
	  "alloc(new_tokens, lookahead=0, use_cache=False)\n--\n\n"
	  "Allocate slots for new_tokens (+ lookahead); with use_cache take the prefix-cache\n"
	  "hit. Returns the hit, tokens. NoSpace when the pool is short." },
	{ "commit", (PyCFunction)sequence_commit, METH_O,
	  "commit(computed)\n--\n\nThe first `computed` tokens have their KV written." },
	{ "free", (PyCFunction)sequence_free, METH_NOARGS,
	  "free()\n--\n\nRelease the blocks, keep the sequence (a preemption)." },
	{ "table", (PyCFunction)sequence_table, METH_NOARGS,
	  "table()\n--\n\nThe block tables: a list of block ids per group (0: the null block)." },
	{ "write_kv", (PyCFunction)sequence_write_kv, METH_VARARGS,
	  "write_kv(group, layer, first, k, v)\n--\n\n"
	  "Store K and V ([n][kv_heads][head_dim], the pool's dtype; bf16 as uint16 bits or\n"
	  "a torch bfloat16 tensor) of positions first .. first + n - 1." },
	{ "read_kv", (PyCFunction)sequence_read_kv, METH_VARARGS,
	  "read_kv(group, layer, first, n)\n--\n\n(k, v) of positions first .. first + n - 1: "
	  "numpy arrays (bf16 as uint16)." },
	{ "attend", (PyCFunction)(void (*)(void))sequence_attend, METH_VARARGS | METH_KEYWORDS,
	  "attend(group, layer, q, first, scale, softcap=0.0)\n--\n\n"
	  "Attention of the queries q (float32 [n][q_heads][head_dim], positions first ..\n"
	  "first + n - 1; n = 1: decode) over the sequence's KV with the group's mask; out\n"
	  "float32, q's shape." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef sequence_getset[] = {
	{ "handle", (getter)sequence_get_handle, NULL, "The daemon's handle.", NULL },
	{ "closed", (getter)sequence_get_closed, NULL, "True once closed.", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot sequence_slots[] = {
	{ Py_tp_dealloc, sequence_dealloc },
	{ Py_tp_methods, sequence_methods },
	{ Py_tp_getset, sequence_getset },
	{ Py_tp_doc, "A sequence (Client.open): a context manager that closes it." },
	{ 0, NULL },
};

PyType_Spec kvpy_sequence_spec = {
	.name = "kvpool.Sequence",
	.basicsize = sizeof(SequenceObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = sequence_slots,
};
