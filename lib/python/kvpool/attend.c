/* SPDX-License-Identifier: MIT */
/* ATTEND's arguments checked and gathered (Client.attend, Sequence.attend, Batch.attend). */
#include <math.h>
#include <string.h>

#include "kvpool_py.h"

void kvpy_attend_release(struct kvpy_attend_call *a)
{
	for (uint32_t s = 0; a->q && s < a->nseqs; s++)
		kvpy_array_release(&a->q[s]);
	PyMem_Free(a->q);
	PyMem_Free(a->reqs);
	Py_XDECREF(a->outs);
	memset(a, 0, sizeof(*a));
}

/* One (sequence, q, first) item into entry @s. */
static int parse_item(ClientObject *client, const struct kvp_pool_info *p, PyObject *item,
		      uint32_t s, struct kvpy_attend_call *a)
{
	PyObject *seq, *q, *out;
	unsigned first;
	void *out_data;

	if (!PyTuple_Check(item) || PyTuple_Size(item) != 3) {
		PyErr_SetString(PyExc_ValueError, "attend: each item is (sequence, q, first)");
		return -1;
	}
	if (!PyArg_ParseTuple(item, "OOO&", &seq, &q, kvpy_u32, &first) ||
	    kvpy_sequence_handle(client, seq, &a->reqs[s].handle) < 0 ||
	    kvpy_array_get(q, "q", -1, s ? (Py_ssize_t)a->q_heads : -1, p->head_dim, KVPY_F32,
			   &a->q[s]) < 0)
		return -1;
	a->nseqs = s + 1; /* from here on, release() hands q back */
	if (!s)
		a->q_heads = (uint32_t)a->q[0].shape[1];
	if (!a->q_heads || a->q_heads % p->kv_heads) {
		PyErr_Format(PyExc_ValueError, "q: %u heads, not a multiple of kv_heads %u",
			     a->q_heads, p->kv_heads);
		return -1;
	}
	out = kvpy_array_new(client->st, KVPY_F32, a->q[s].shape[0], a->q_heads, p->head_dim,
			     &out_data);
	if (!out)
		return -1;
	PyList_SetItem(a->outs, s, out);
	a->reqs[s].first_pos = first;
	a->reqs[s].count = (uint32_t)a->q[s].shape[0];
	a->reqs[s].q = a->q[s].data;
	a->reqs[s].out = out_data;
	return 0;
}

int kvpy_attend_parse(ClientObject *client, PyObject *args, PyObject *kwds,
		      struct kvpy_attend_call *a)
{
	static char *kwlist[] = { "group", "layer", "items", "scale", "softcap", NULL };
	const struct kvp_pool_info *p;
	unsigned group, layer;
	double scale, softcap = 0.0;
	PyObject *items;
	Py_ssize_t n;

	memset(a, 0, sizeof(*a));
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&O&Od|d:attend", kwlist, kvpy_u32, &group, kvpy_u32, &layer,
					 &items, &scale, &softcap))
		return -1;
	if (!(p = kvpy_pool(client)))
		return -1;
	if (group > 0xffff || layer > 0xffff || !isfinite(scale) || !isfinite(softcap) ||
	    softcap < 0) {
		PyErr_Format(PyExc_ValueError, "attend: group %u, layer %u (0..65535), scale and a "
			     "softcap >= 0 finite", group, layer);
		return -1;
	}
	n = PyObject_Length(items);
	if (n <= 0 || n > KVP_ATTEND_MAX_SEQS) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "attend: items: a list of 1..%d (sequence, q, first)",
			     KVP_ATTEND_MAX_SEQS);
		return -1;
	}
	a->group = group;
	a->layer = layer;
	a->scale = (float)scale;
	a->softcap = (float)softcap;
	a->reqs = PyMem_Calloc((size_t)n, sizeof(*a->reqs));
	a->q = PyMem_Calloc((size_t)n, sizeof(*a->q));
	a->outs = PyList_New(n);
	if (!a->reqs || !a->q || !a->outs) {
		if (!PyErr_Occurred())
			PyErr_NoMemory();
		goto release;
	}
	for (Py_ssize_t s = 0; s < n; s++) {
		PyObject *item = PySequence_GetItem(items, s);
		int ret = item ? parse_item(client, p, item, (uint32_t)s, a) : -1;

		Py_XDECREF(item);
		if (ret < 0)
			goto release;
	}
	return 0;

release:
	kvpy_attend_release(a);
	return -1;
}

int kvpy_attend_parse_one(ClientObject *client, PyObject *seq, unsigned group, unsigned layer,
			  PyObject *q, PyObject *first, double scale, double softcap,
			  struct kvpy_attend_call *a)
{
	PyObject *args = Py_BuildValue("(II[(OOO)]dd)", group, layer, seq, q, first, scale,
				       softcap);
	int ret;

	if (!args)
		return -1;
	ret = kvpy_attend_parse(client, args, NULL, a);
	Py_DECREF(args);
	return ret;
}

PyObject *kvpy_attend_run(ClientObject *client, struct kvpy_attend_call *a)
{
	PyObject *outs;
	int ret;

	KVPY_LOCKED_CALL(client, ret, kvp_attend(client->c, a->group, a->layer, a->q_heads,
						 a->scale, a->softcap, true, a->reqs, a->nseqs));
	outs = ret < 0 ? NULL : Py_NewRef(a->outs);
	kvpy_attend_release(a);
	if (ret < 0 && ret != INT32_MIN)
		kvpy_raise(client->st, ret, "attend", NULL);
	return outs;
}

PyObject *kvpy_attend(ClientObject *client, PyObject *args, PyObject *kwds)
{
	struct kvpy_attend_call a;

	if (kvpy_attend_parse(client, args, kwds, &a) < 0)
		return NULL;
	return kvpy_attend_run(client, &a);
}
