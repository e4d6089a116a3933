/* SPDX-License-Identifier: MIT */
/*
 * kvpool.Lookup: a LOOKUP out (Sequence.lookup_async), for a scheduler that
 * must not wait while a pool's cluster tier asks the network. done() looks
 * without waiting; result() waits, the connection's lock let go every slice
 * so that the client's other calls go on meanwhile.
 */
#include <errno.h>

#include "kvpool_py.h"

/* result()'s wait holds the connection at most this long at a time. */
#define WAIT_SLICE_NS (5ull * 1000000ull)

typedef struct {
	PyObject_HEAD
	SequenceObject *seq;
	uint64_t ticket;
	bool out;            /* the ticket is the library's still */
	int res;             /* once answered: the hit in tokens, or -errno */
} LookupObject;

PyObject *kvpy_lookup_new(SequenceObject *seq, uint64_t ticket)
{
	LookupObject *self = (LookupObject *)kvpy_alloc(seq->client->st->lookup_type);

	if (!self)
		return NULL;
	self->seq = (SequenceObject *)Py_NewRef((PyObject *)seq);
	self->ticket = ticket;
	self->out = true;
	return (PyObject *)self;
}

/*
 * A lookup dropped while out: its ticket is given back at the connection's
 * next call (kvpy_lock), never waiting here for a lock another thread holds.
 */
static void lookup_dealloc(LookupObject *self)
{
	ClientObject *client = self->seq->client;

	if (self->out && client->c && self->seq->epoch == client->epoch &&
	    client->ndrops < KVP_LOOKUPS_MAX)
		client->drops[client->ndrops++] = self->ticket;
	Py_DECREF(self->seq);
	kvpy_free(self);
}

/* One poll, waiting up to @wait_ns: true once answered (self->res set); -1 with an exception. */
static int poll_once(LookupObject *self, uint64_t wait_ns)
{
	ClientObject *client = self->seq->client;
	int ret;

	if (!self->out)
		return 1;
	if (self->seq->epoch != client->epoch) { /* out on the connection before reconnect() */
		self->out = false;
		self->res = -ECONNRESET;
		return 1;
	}
	KVPY_LOCKED_CALL(client, ret, kvp_lookup_poll(client->c, self->ticket, wait_ns));
	if (ret == INT32_MIN)
		return -1;
	if (ret == -EINPROGRESS)
		return 0;
	self->out = false;
	self->res = ret;
	return 1;
}

static PyObject *lookup_done(LookupObject *self, PyObject *unused)
{
	int ret;

	(void)unused;
	ret = poll_once(self, 0);
	return ret < 0 ? NULL : PyBool_FromLong(ret);
}

static PyObject *lookup_result(LookupObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "timeout", NULL };
	PyObject *timeout = Py_None;
	uint64_t deadline = UINT64_MAX, now, left;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:result", kwlist, &timeout))
		return NULL;
	if (timeout != Py_None) {
		double s = PyFloat_AsDouble(timeout);

		if (s == -1.0 && PyErr_Occurred())
			return NULL;
		if (!(s >= 0)) {
			PyErr_SetString(PyExc_ValueError, "timeout: seconds, 0 or more");
			return NULL;
		}
		deadline = kvpy_monotonic_ns() + (s < 1e9 ? (uint64_t)(s * 1e9) : UINT64_MAX / 2);
	}
	for (;;) {
		now = kvpy_monotonic_ns();
		left = deadline > now ? deadline - now : 0;
		ret = poll_once(self, left < WAIT_SLICE_NS ? left : WAIT_SLICE_NS);
		if (ret < 0)
			return NULL;
		if (ret)
			break;
		if (kvpy_monotonic_ns() >= deadline) {
			PyErr_SetString(PyExc_TimeoutError, "lookup: not answered within the timeout");
			return NULL;
		}
		if (PyErr_CheckSignals() < 0)
			return NULL;
	}
	if (self->res < 0)
		return kvpy_raise(self->seq->client->st, self->res, "lookup", NULL);
	return PyLong_FromLong(self->res);
}

static PyObject *lookup_get_sequence(LookupObject *self, void *closure)
{
	(void)closure;
	return Py_NewRef((PyObject *)self->seq);
}

static PyMethodDef lookup_methods[] = {
	{ "done", (PyCFunction)lookup_done, METH_NOARGS,
	  "done()\n--\n\nWhether the answer came (never waits)." },
	{ "result", (PyCFunction)(void (*)(void))lookup_result, METH_VARARGS | METH_KEYWORDS,
	  "result(timeout=None)\n--\n\n"
	  "The prefix-cache hit, tokens, as Sequence.lookup() says it; waits for it up to\n"
	  "timeout seconds (None: as long as it takes), TimeoutError after. The connection's\n"
	  "other calls go on meanwhile." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef lookup_getset[] = {
	{ "sequence", (getter)lookup_get_sequence, NULL, "The Sequence looked up.", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot lookup_slots[] = {
	{ Py_tp_dealloc, lookup_dealloc },
	{ Py_tp_methods, lookup_methods },
	{ Py_tp_getset, lookup_getset },
	{ Py_tp_doc, "A lookup out (Sequence.lookup_async): done(), result(timeout=None)." },
	{ 0, NULL },
};

PyType_Spec kvpy_lookup_spec = {
	.name = "kvpool.Lookup",
	.basicsize = sizeof(LookupObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = lookup_slots,
};
