/* SPDX-License-Identifier: MIT */
/*
 * kvpool.Batch: operations collected in a `with client.batch() as b:` block
 * and run at its end in as few ring submissions as the ring allows.
 *
 * They take effect as if run one by one in call order. The daemon takes the
 * SQ in order, and a control request (ALLOC, COMMIT, FREE) is done by the
 * time it takes the next; only the data path (WRITE_KV, ATTEND) completes on
 * workers, unordered. So an operation waits (the ring is drained) only when
 * a data request of one of its sequences is still in flight, when the arena
 * is full, or when the rings are.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"

typedef struct {
	PyObject_HEAD
	ClientObject *client;
	struct bop *ops;
	size_t nops, cap;
	PyObject *results; /* None until run */
} BatchObject;

PyObject *kvpy_batch_new(ClientObject *client)
{
	PyTypeObject *type = client->st->batch_type;
	BatchObject *self = (BatchObject *)kvpy_alloc(type);

	if (!self)
		return NULL;
	self->client = (ClientObject *)Py_NewRef((PyObject *)client);
	self->results = Py_NewRef(Py_None);
	return (PyObject *)self;
}

static void release_ops(BatchObject *self)
{
	for (size_t i = 0; i < self->nops; i++) {
		kvpy_array_release(&self->ops[i].k);
		kvpy_array_release(&self->ops[i].v);
		kvpy_attend_release(&self->ops[i].att);
		PyMem_Free(self->ops[i].tokens);
		free(self->ops[i].lists);
	}
	PyMem_Free(self->ops);
	self->ops = NULL;
	self->nops = self->cap = 0;
}

static void batch_dealloc(BatchObject *self)
{
	release_ops(self);
	Py_DECREF(self->client);
	Py_DECREF(self->results);
	kvpy_free(self);
}

/* A new zeroed operation at the end, or NULL (raised). */
static struct bop *add_op(BatchObject *self, enum bop_kind kind)
{
	struct bop *op;

	if (self->results != Py_None) {
		PyErr_SetString(PyExc_ValueError, "batch: already run");
		return NULL;
	}
	if (self->nops == self->cap) {
		size_t cap = self->cap ? 2 * self->cap : 64;
		struct bop *ops = PyMem_Realloc(self->ops, cap * sizeof(*ops));

		if (!ops) {
			PyErr_NoMemory();
			return NULL;
		}
		self->ops = ops;
		self->cap = cap;
	}
	op = &self->ops[self->nops];
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	return op;
}

/* Item @i of @obj when it is a list or tuple, else @obj itself (borrowed). */
static PyObject *nth(PyObject *obj, Py_ssize_t i)
{
	if (PyList_Check(obj))
		return PyList_GetItem(obj, i);
	if (PyTuple_Check(obj))
		return PyTuple_GetItem(obj, i);
	return obj;
}

/*
 * ALLOC or COMMIT of one sequence, or of each of a list of them (@n likewise one value or
 * a list as long): one operation each, all added or none.
 */
static PyObject *add_seq_ops(BatchObject *self, enum bop_kind kind, PyObject *seqs, PyObject *n,
			     PyObject *lookahead, int use_cache, int blocks)
{
	const struct kvp_pool_info *pool = kvp_pool_info(self->client->c);
	bool many = PyList_Check(seqs) || PyTuple_Check(seqs);
	Py_ssize_t count = many ? PyObject_Length(seqs) : 1;
	size_t first = self->nops;

	if (many && (PyList_Check(n) || PyTuple_Check(n)) && PyObject_Length(n) != count)
		return PyErr_Format(PyExc_ValueError, "%zd sequences, %zd counts", count,
				    PyObject_Length(n));
	if (!many && (PyList_Check(n) || PyTuple_Check(n)))
		return PyErr_Format(PyExc_ValueError, "a list of counts for one sequence");
	for (Py_ssize_t i = 0; i < count; i++) {
		struct bop *op = add_op(self, kind);

		if (!op || kvpy_sequence_handle(self->client, nth(seqs, i), &op->handle) < 0 ||
		    !kvpy_u32(nth(n, i), &op->n) || (lookahead && !kvpy_u32(lookahead, &op->lookahead))) {
			self->nops = first;
			return NULL;
		}
		op->use_cache = use_cache;
		if (blocks) {
			/* ALLOC's new blocks: at most the new slots' blocks and one, per group. */
			uint32_t bs = pool && pool->block_size ? pool->block_size : 1;
			uint64_t per = ((uint64_t)op->n + op->lookahead + bs - 1) / bs + 2;
			uint64_t bytes = sizeof(struct kvp_block_lists) +
					 per * (pool ? pool->num_groups : 1) * sizeof(uint32_t);

			if (bytes > UINT32_MAX) {
				self->nops = first;
				return PyErr_Format(PyExc_ValueError, "alloc: %u new tokens", op->n);
			}
			op->blocks = true;
			op->lists_bytes = (uint32_t)bytes;
		}
		self->nops++;
	}
	Py_RETURN_NONE;
}

/* b.alloc(seq, new_tokens, lookahead=0, use_cache=False): vectorcall, as it runs per sequence. */
static PyObject *batch_alloc(BatchObject *self, PyObject *const *args, Py_ssize_t nargs,
			     PyObject *kwnames)
{
	PyObject *lookahead = nargs > 2 ? args[2] : NULL, *use_cache = nargs > 3 ? args[3] : NULL;
	PyObject *blocks = nargs > 4 ? args[4] : NULL;
	Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
	int truth = 0, want_blocks = 0;

	if (nargs < 2 || nargs > 5) {
		PyErr_SetString(PyExc_TypeError,
				"alloc(seq, new_tokens, lookahead=0, use_cache=False, blocks=False)");
		return NULL;
	}
	for (Py_ssize_t i = 0; i < nkw; i++) {
		const char *key = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(kwnames, i), NULL);

		if (key && !strcmp(key, "lookahead"))
			lookahead = args[nargs + i];
		else if (key && !strcmp(key, "use_cache"))
			use_cache = args[nargs + i];
		else if (key && !strcmp(key, "blocks"))
			blocks = args[nargs + i];
		else
			return PyErr_Format(PyExc_TypeError, "alloc: unknown keyword %s", key);
	}
	if (use_cache && (truth = PyObject_IsTrue(use_cache)) < 0)
		return NULL;
	if (blocks && (want_blocks = PyObject_IsTrue(blocks)) < 0)
		return NULL;
	return add_seq_ops(self, BOP_ALLOC, args[0], args[1], lookahead, truth, want_blocks);
}

static PyObject *batch_commit(BatchObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 2) {
		PyErr_SetString(PyExc_TypeError, "commit(seq, computed)");
		return NULL;
	}
	return add_seq_ops(self, BOP_COMMIT, args[0], args[1], NULL, 0, 0);
}

static PyObject *batch_free(BatchObject *self, PyObject *seq)
{
	struct bop *op = add_op(self, BOP_FREE);

	if (!op || kvpy_sequence_handle(self->client, seq, &op->handle) < 0)
		return NULL;
	self->nops++;
	Py_RETURN_NONE;
}

/*
 * b.append(seq, tokens), or b.append([seq, ...], [tokens, ...]) with each
 * tokens an int or ints: one APPEND_TOKENS each, all added or none.
 */
static PyObject *batch_append(BatchObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	PyObject *seqs, *tokens;
	bool many;
	Py_ssize_t count;
	size_t first = self->nops;

	if (nargs != 2) {
		PyErr_SetString(PyExc_TypeError, "append(seq, tokens)");
		return NULL;
	}
	seqs = args[0];
	tokens = args[1];
	many = PyList_Check(seqs) || PyTuple_Check(seqs);
	count = many ? PyObject_Length(seqs) : 1;
	if (many && (!(PyList_Check(tokens) || PyTuple_Check(tokens)) ||
		     PyObject_Length(tokens) != count))
		return PyErr_Format(PyExc_ValueError, "append: %zd sequences need a list of as many "
				    "tokens (an int or ints each)", count);
	for (Py_ssize_t i = 0; i < count; i++) {
		PyObject *item = many ? nth(tokens, i) : tokens, *one = NULL;
		struct bop *op = add_op(self, BOP_APPEND);
		int ret = -1;

		if (op && kvpy_sequence_handle(self->client, nth(seqs, i), &op->handle) == 0) {
			if (PyLong_Check(item))
				item = one = PyTuple_Pack(1, item);
			ret = item ? kvpy_tokens(item, &op->tokens, &op->n) : -1;
			Py_XDECREF(one);
		}
		if (ret < 0) {
			while (self->nops > first)
				PyMem_Free(self->ops[--self->nops].tokens);
			return NULL;
		}
		self->nops++;
	}
	Py_RETURN_NONE;
}

static PyObject *batch_write_kv(BatchObject *self, PyObject *args)
{
	PyObject *seq, *k, *v;
	unsigned group, layer, first;
	struct bop *op;

	if (!PyArg_ParseTuple(args, "OO&O&O&OO:write_kv", &seq, kvpy_u32, &group, kvpy_u32,
			      &layer, kvpy_u32, &first, &k, &v))
		return NULL;
	if (!(op = add_op(self, BOP_WRITE_KV)) ||
	    kvpy_sequence_handle(self->client, seq, &op->handle) < 0 ||
	    kvpy_kv_arrays(self->client, group, layer, k, v, &op->k, &op->v) < 0)
		return NULL;
	op->group = (uint16_t)group;
	op->layer = (uint16_t)layer;
	op->first = first;
	op->n = (uint32_t)op->k.shape[0];
	self->nops++;
	Py_RETURN_NONE;
}

/* b.attend(group, layer, items, scale, softcap=0.0) as Client.attend, or
 * b.attend(seq, group, layer, q, first, scale, softcap=0.0) as Sequence.attend. */
static PyObject *batch_attend(BatchObject *self, PyObject *args, PyObject *kwds)
{
	struct bop *op = add_op(self, BOP_ATTEND);
	PyObject *first = PyTuple_Size(args) ? PyTuple_GetItem(args, 0) : NULL;
	int ret;

	if (!op)
		return NULL;
	if (first && PyObject_TypeCheck(first, self->client->st->sequence_type)) {
		static char *kwlist[] = { "seq", "group", "layer", "q", "first", "scale", "softcap",
					  NULL };
		PyObject *seq, *q, *pos;
		unsigned group, layer;
		double scale, softcap = 0.0;

		if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO&O&OOd|d:attend", kwlist, &seq,
						 kvpy_u32, &group, kvpy_u32, &layer, &q, &pos,
						 &scale, &softcap))
			return NULL;
		ret = kvpy_attend_parse_one(self->client, seq, group, layer, q, pos, scale, softcap,
					    &op->att);
		op->single = true;
	} else {
		ret = kvpy_attend_parse(self->client, args, kwds, &op->att);
	}
	if (ret < 0)
		return NULL;
	self->nops++;
	Py_RETURN_NONE;
}

static PyObject *batch_enter(PyObject *self, PyObject *unused)
{
	(void)unused;
	return Py_NewRef(self);
}

/* The result of one operation, or the exception that stands for its failure. */
static PyObject *result_of(BatchObject *self, const struct bop *op)
{
	static const char *const names[] = { "alloc", "commit", "free", "append", "write_kv",
					     "attend" };

	if (op->res < 0)
		return kvpy_error_new(self->client->st, op->res, names[op->kind], NULL);
	switch (op->kind) {
	case BOP_ALLOC:
		if (op->blocks) {
			PyObject *lists, *pair;

			/* A completion without its lists: not an ALLOC's (ALLOC answers 0). */
			if (!op->lists)
				return kvpy_error_new(self->client->st, -EPROTO, "alloc", NULL);
			lists = kvpy_lists_to_python(op->lists);
			pair = lists ? Py_BuildValue("(KO)", (unsigned long long)op->aux, lists) : NULL;

			Py_XDECREF(lists);
			return pair;
		}
		return PyLong_FromUnsignedLongLong(op->aux);
	case BOP_ATTEND:
		return Py_NewRef(op->single ? PyList_GetItem(op->att.outs, 0) : op->att.outs);
	default: Py_RETURN_NONE;
	}
}

/* kvpool.BatchError: the first failure's errno, how many failed, and .results. */
static PyObject *raise_batch_error(BatchObject *self, size_t failed, size_t first_failed)
{
	PyObject *first = PyList_GetItem(self->results, (Py_ssize_t)first_failed);
	PyObject *errno_obj = PyObject_GetAttrString(first, "errno");
	PyObject *text = PyUnicode_FromFormat("batch: %zu of %zd operations failed; the first, "
					      "#%zu: %S", failed, PyList_Size(self->results),
					      first_failed, first);
	PyObject *exc = text && errno_obj ?
				PyObject_CallFunction(self->client->st->batch_error, "OO",
						      errno_obj, text) :
				NULL;

	Py_XDECREF(text);
	Py_XDECREF(errno_obj);
	if (exc && PyObject_SetAttrString(exc, "results", self->results) == 0 &&
	    PyObject_SetAttrString(exc, "reason", Py_None) == 0)
		PyErr_SetObject(self->client->st->batch_error, exc);
	Py_XDECREF(exc);
	return NULL;
}

static PyObject *batch_exit(BatchObject *self, PyObject *args)
{
	PyObject *exc_type = PyTuple_Size(args) ? PyTuple_GetItem(args, 0) : Py_None;
	PyObject *results;
	size_t failed = 0, first_failed = 0;
	int ret = 0;

	/* The block raised: what it collected is dropped, nothing was sent. */
	if (exc_type != Py_None || self->results != Py_None) {
		release_ops(self);
		Py_RETURN_FALSE;
	}
	if (self->nops) {
		if (kvpy_lock(self->client) < 0)
			return NULL;
		Py_BEGIN_ALLOW_THREADS
		ret = kvpy_run_batch(self->client, self->ops, self->nops);
		Py_END_ALLOW_THREADS
		kvpy_unlock(self->client);
	}
	if (ret < 0) {
		release_ops(self);
		return PyErr_NoMemory();
	}
	results = PyList_New((Py_ssize_t)self->nops);
	for (size_t i = 0; results && i < self->nops; i++) {
		PyObject *r = result_of(self, &self->ops[i]);

		if (!r) {
			Py_CLEAR(results);
			break;
		}
		if (self->ops[i].res < 0 && !failed++)
			first_failed = i;
		PyList_SetItem(results, (Py_ssize_t)i, r);
	}
	release_ops(self);
	if (!results)
		return NULL;
	KVPY_SETREF(self->results, results);
	if (failed)
		return raise_batch_error(self, failed, first_failed);
	Py_RETURN_FALSE;
}

static PyObject *batch_get_results(BatchObject *self, void *closure)
{
	(void)closure;
	return Py_NewRef(self->results);
}

static PyMethodDef batch_methods[] = {
	{ "__enter__", batch_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)batch_exit, METH_VARARGS, NULL },
	{ "alloc", (PyCFunction)(void (*)(void))batch_alloc, METH_FASTCALL | METH_KEYWORDS,
	  "alloc(seq, new_tokens, lookahead=0, use_cache=False, blocks=False)\n--\n\nAs "
	  "Sequence.alloc; its result the hit, tokens, or with blocks=True (hit,\n"
	  "new_blocks): the blocks this ALLOC put in the tables, a list per group, which\n"
	  "end each table. seq may be a list of sequences (new_tokens one count or a\n"
	  "list as long): an operation, and a result, for each." },
	{ "commit", (PyCFunction)(void (*)(void))batch_commit, METH_FASTCALL,
	  "commit(seq, computed)\n--\n\nAs Sequence.commit; its result None. seq may be a "
	  "list of\nsequences (computed one count or a list as long)." },
	{ "free", (PyCFunction)batch_free, METH_O, "free(seq)\n--\n\nAs Sequence.free." },
	{ "append", (PyCFunction)(void (*)(void))batch_append, METH_FASTCALL,
	  "append(seq, tokens)\n--\n\nAs Sequence.append (tokens an int or ints); its result "
	  "None.\nseq may be a list of sequences, tokens then a list as long." },
	{ "write_kv", (PyCFunction)batch_write_kv, METH_VARARGS,
	  "write_kv(seq, group, layer, first, k, v)\n--\n\nAs Sequence.write_kv." },
	{ "attend", (PyCFunction)(void (*)(void))batch_attend, METH_VARARGS | METH_KEYWORDS,
	  "attend(group, layer, items, scale, softcap=0.0)\n"
	  "attend(seq, group, layer, q, first, scale, softcap=0.0)\n--\n\n"
	  "As Client.attend (its result the list of outputs) or Sequence.attend (the output)." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef batch_getset[] = {
	{ "results", (getter)batch_get_results, NULL,
	  "Once run: each operation's result in call order (an exception in place of a "
	  "failure); None before.", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot batch_slots[] = {
	{ Py_tp_dealloc, batch_dealloc },
	{ Py_tp_methods, batch_methods },
	{ Py_tp_getset, batch_getset },
	{ Py_tp_doc, "Operations run together at the end of a `with client.batch() as b:` "
		     "block; kvpool.BatchError after all ran if any failed." },
	{ 0, NULL },
};

PyType_Spec kvpy_batch_spec = {
	.name = "kvpool.Batch",
	.basicsize = sizeof(BatchObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = batch_slots,
};
