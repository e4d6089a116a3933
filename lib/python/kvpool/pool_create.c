/* SPDX-License-Identifier: MIT */
/*
 * Client.create_pool: its arguments become the key=value words of
 * kvp_pool_params_v2_set (the parser kvctl and the config file use), so a
 * value is judged here exactly as there.
 */
#include <errno.h>
#include <string.h>

#include "kvpool_py.h"

/* key=str(value) into @p; None leaves the default. ValueError naming the key otherwise. */
static int set_param(struct kvp_pool_params_v2 *p, const char *key, PyObject *value)
{
	PyObject *text;
	const char *s;
	int ret;

	if (value == Py_None)
		return 0;
	if (PyBool_Check(value) || !(PyLong_Check(value) || PyUnicode_Check(value))) {
		PyErr_Format(PyExc_ValueError, "create_pool: %s: an int or a str, not %R", key,
			     (PyObject *)Py_TYPE(value));
		return -1;
	}
	text = PyObject_Str(value);
	if (!text)
		return -1;
	s = PyUnicode_AsUTF8AndSize(text, NULL);
	ret = s ? kvp_pool_params_v2_set(p, key, s) : -1;
	if (ret == -EINVAL)
		PyErr_Format(PyExc_ValueError, "create_pool: %s=%s: not a valid value", key, s);
	Py_DECREF(text);
	return ret ? -1 : 0;
}

/* [('full', 0), ('swa', 128)] as "full swa:128". */
static PyObject *groups_words(PyObject *groups)
{
	PyObject *words = PyUnicode_FromString(""), *it = PyObject_GetIter(groups), *item;

	if (!it) {
		PyErr_Clear();
		PyErr_SetString(PyExc_ValueError, "create_pool: groups: a list of (kind, param)");
	}
	while (words && it && (item = PyIter_Next(it))) {
		const char *kind;
		unsigned param;
		PyObject *word = NULL;

		if (PyTuple_Check(item) && PyArg_ParseTuple(item, "sO&", &kind, kvpy_u32, &param))
			word = !strcmp(kind, "full") && !param ?
				       PyUnicode_FromFormat("%s%s", PyUnicode_GetLength(words) ? " " : "",
							    kind) :
				       PyUnicode_FromFormat("%s%s:%u",
							    PyUnicode_GetLength(words) ? " " : "", kind,
							    param);
		else if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
			PyErr_Clear();
			PyErr_Format(PyExc_ValueError, "create_pool: groups: %R is not (kind, param)",
				     item);
		}
		Py_DECREF(item);
		if (word) {
			PyObject *joined = PyUnicode_Concat(words, word);

			Py_DECREF(word);
			KVPY_SETREF(words, joined);
		} else {
			Py_CLEAR(words);
		}
	}
	Py_XDECREF(it);
	if (PyErr_Occurred())
		Py_CLEAR(words);
	return words;
}

PyObject *kvpy_create_pool(ClientObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "name", "blocks", "block_size", "groups", "kv_heads", "head_dim",
				  "layers_per_group", "dtype", "max_len", "namespace", "backend",
				  "layout", "owned", "device", "max_step_tokens", "keys", NULL };
	PyObject *blocks, *block_size, *groups, *kv_heads = NULL, *head_dim = NULL,
		 *layers = NULL, *dtype = NULL, *max_len = Py_None, *ns = NULL, *backend = NULL,
		 *layout = Py_None, *device = Py_None, *max_step = Py_None, *words;
	const char *name, *keys = NULL;
	char why[KVP_REASON_MAX], what[KVP_NAME_MAX + 16];
	struct kvp_pool_params_v2 p;
	int owned = 0, ret;
	bool holds_kv;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "sOOO|OOOOOOOOp$OOz:create_pool", kwlist,
					 &name, &blocks, &block_size, &groups, &kv_heads, &head_dim,
					 &layers, &dtype, &max_len, &ns, &backend, &layout, &owned,
					 &device, &max_step, &keys))
		return NULL;
	if (!*name || strlen(name) >= KVP_NAME_MAX)
		return PyErr_Format(PyExc_ValueError, "create_pool: name: 1..%d bytes",
				    KVP_NAME_MAX - 1);
	kvp_pool_params_v2_init(&p, name);
	words = groups_words(groups);
	if (!words)
		return NULL;
	ret = set_param(&p, "blocks", blocks) ?: set_param(&p, "block_size", block_size) ?:
	      set_param(&p, "groups", words) ?: set_param(&p, "max_len", max_len) ?:
	      set_param(&p, "layout", layout) ?: set_param(&p, "device", device) ?:
	      set_param(&p, "max_step_tokens", max_step);
	Py_DECREF(words);
	if (!ret && ns && PyUnicode_Check(ns) && PyUnicode_GetLength(ns))
		ret = set_param(&p, "namespace", ns);
	if (!ret && backend)
		ret = set_param(&p, "backend", backend);
	/* Geometry only for a pool that holds KV: kv_heads 0 means none. */
	holds_kv = kv_heads && !(PyLong_Check(kv_heads) && PyLong_AsLong(kv_heads) == 0);
	if (!ret && holds_kv) {
		PyObject *one = PyLong_FromLong(1);

		ret = !one ? -1 :
		      set_param(&p, "kv_heads", kv_heads) ?:
		      set_param(&p, "head_dim", head_dim ? head_dim : Py_None) ?:
		      set_param(&p, "layers_per_group", layers ? layers : one);
		Py_XDECREF(one);
	}
	/* A pool without KV keeps its dtype too: what PoolInfo reports is what was asked. */
	if (!ret) {
		PyObject *bf16 = PyUnicode_FromString("bf16");

		ret = bf16 ? set_param(&p, "dtype", dtype ? dtype : bf16) : -1;
		Py_XDECREF(bf16);
	}
	if (ret)
		return NULL;
	/* keys: POOL_CREATE v3's text, applied by the daemon over the arguments above. */
	if (keys)
		KVPY_LOCKED_CALL(self, ret, kvp_pool_create_v3(self->c, &p, keys,
							       owned ? KVP_POOL_OWNED : 0, why,
							       sizeof(why)));
	else
		KVPY_LOCKED_CALL(self, ret, kvp_pool_create_v2(self->c, &p,
							       owned ? KVP_POOL_OWNED : 0, why,
							       sizeof(why)));
	if (ret == INT32_MIN)
		return NULL;
	if (ret < 0) {
		snprintf(what, sizeof(what), "create_pool %s", name);
		return kvpy_raise(self->st, ret, what, why);
	}
	Py_RETURN_NONE;
}
