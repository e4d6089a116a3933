/* SPDX-License-Identifier: MIT */
/*
 * kvpool._kvpool: the module, its exception classes and PoolInfo. Multi-phase
 * init with its state in the module, so nothing here is a global.
 */
#include <errno.h>
#include <string.h>

#include "kvpool_py.h"

PyObject *kvpy_import_attr(PyObject **slot, const char *module, const char *name)
{
	if (!*slot) {
		PyObject *mod = PyImport_ImportModule(module);

		*slot = mod ? PyObject_GetAttrString(mod, name) : NULL;
		Py_XDECREF(mod);
	}
	return *slot;
}

const char *kvpy_dtype_label(uint32_t kvp_dtype)
{
	return kvp_dtype == KVP_DTYPE_F32 ? "f32" : kvp_dtype == KVP_DTYPE_F16 ? "f16" : "bf16";
}

int kvpy_u32(PyObject *obj, void *out)
{
	PyObject *index = PyNumber_Index(obj);
	unsigned long long v;

	if (!index)
		return 0;
	v = PyLong_AsUnsignedLongLong(index);
	Py_DECREF(index);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		if (!PyErr_ExceptionMatches(PyExc_OverflowError))
			return 0;
		PyErr_Clear();
		v = UINT64_MAX;
	}
	if (v > UINT32_MAX) {
		PyErr_Format(PyExc_ValueError, "%R: not in 0..4294967295", obj);
		return 0;
	}
	*(uint32_t *)out = (uint32_t)v;
	return 1;
}

static PyObject *error_class(struct kvpy_state *st, int err)
{
	switch (err) {
	case ENOSPC: return st->no_space;
	case EDQUOT: case EUSERS: return st->quota_exceeded;
	case ENODATA: return st->no_data;
	case EPERM: case EACCES: return st->permission_denied;
	case ENODEV: case ENOENT: return st->not_found;
	case ETIMEDOUT: return st->timeout;
	case ECONNRESET: case ENOTCONN: case EPIPE: return st->disconnected;
	default: return st->error;
	}
}

/* cls(errno, "what: strerror[: why]") with .reason = why (None when the daemon gave none). */
PyObject *kvpy_error_new_as(PyObject *cls, int err, const char *what, const char *why)
{
	PyObject *text, *exc, *reason;
	bool has_why = why && *why;

	text = has_why ? PyUnicode_FromFormat("%s: %s: %s", what, strerror(-err), why) :
			 PyUnicode_FromFormat("%s: %s", what, strerror(-err));
	if (!text)
		return NULL;
	exc = PyObject_CallFunction(cls, "iO", -err, text);
	Py_DECREF(text);
	if (!exc)
		return NULL;
	reason = has_why ? PyUnicode_DecodeUTF8(why, (Py_ssize_t)strlen(why), "replace") :
			   Py_NewRef(Py_None);
	if (!reason || PyObject_SetAttrString(exc, "reason", reason) < 0) {
		Py_XDECREF(reason);
		Py_DECREF(exc);
		return NULL;
	}
	Py_DECREF(reason);
	return exc;
}

PyObject *kvpy_error_new(struct kvpy_state *st, int err, const char *what, const char *why)
{
	return kvpy_error_new_as(error_class(st, -err), err, what, why);
}

PyObject *kvpy_raise_as(PyObject *cls, int err, const char *what, const char *why)
{
	PyObject *exc = kvpy_error_new_as(cls, err, what, why);

	if (exc) {
		PyErr_SetObject(cls, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

PyObject *kvpy_raise(struct kvpy_state *st, int err, const char *what, const char *why)
{
	return kvpy_raise_as(error_class(st, -err), err, what, why);
}

static PyStructSequence_Field pool_info_fields[] = {
	{ "name", "the pool's name" },
	{ "num_blocks", "blocks, the null block 0 included" },
	{ "block_size", "tokens per block" },
	{ "groups", "[(kind, param)]: kind 'full' 'swa' 'rswa' 'chunked' or 'cyclic'" },
	{ "kv_heads", "KV heads (0: the pool holds no KV)" },
	{ "head_dim", "elements per head" },
	{ "dtype", "'f32' 'f16' or 'bf16'" },
	{ "layers_per_group", "layers stored per group" },
	{ "max_len", "the longest sequence, tokens" },
	{ "generation", "random when the pool was built, the same for as long as it is (a planned "
			"restart of the daemon hands it on): another pool of the same name, or the "
			"pool built again, has another (0 from an older daemon); by name only, not "
			"in the tuple" },
	{ NULL, NULL },
};

static PyStructSequence_Desc pool_info_desc = {
	.name = "kvpool.PoolInfo",
	.doc = "The attached pool's geometry (Client.pool).",
	.fields = pool_info_fields,
	.n_in_sequence = 9,
};

PyObject *kvpy_pool_info(ClientObject *self)
{
	const struct kvp_pool_info *p;
	PyObject *info, *groups;

	if (!self->c || self->pool_name == Py_None)
		Py_RETURN_NONE;
	p = kvp_pool_info(self->c);
	groups = PyList_New(0);
	if (!groups)
		return NULL;
	for (uint32_t g = 0; g < p->num_groups && g < KVP_MAX_GROUPS; g++) {
		PyObject *pair = Py_BuildValue("(sI)", kvp_kind_name(p->group_kind[g]),
					       p->group_param[g]);

		if (!pair || PyList_Append(groups, pair) < 0) {
			Py_XDECREF(pair);
			Py_DECREF(groups);
			return NULL;
		}
		Py_DECREF(pair);
	}
	info = PyStructSequence_New(self->st->pool_info_type);
	if (!info) {
		Py_DECREF(groups);
		return NULL;
	}
	PyStructSequence_SetItem(info, 0, Py_NewRef(self->pool_name));
	PyStructSequence_SetItem(info, 1, PyLong_FromUnsignedLong(p->num_blocks));
	PyStructSequence_SetItem(info, 2, PyLong_FromUnsignedLong(p->block_size));
	PyStructSequence_SetItem(info, 3, groups);
	PyStructSequence_SetItem(info, 4, PyLong_FromUnsignedLong(p->kv_heads));
	PyStructSequence_SetItem(info, 5, PyLong_FromUnsignedLong(p->head_dim));
	PyStructSequence_SetItem(info, 6, PyUnicode_FromString(kvpy_dtype_label(p->dtype)));
	PyStructSequence_SetItem(info, 7, PyLong_FromUnsignedLong(p->layers_per_group));
	PyStructSequence_SetItem(info, 8, PyLong_FromUnsignedLong(p->max_len));
	PyStructSequence_SetItem(info, 9, PyLong_FromUnsignedLongLong(kvp_pool_generation(self->c)));
	if (PyErr_Occurred()) {
		Py_DECREF(info);
		return NULL;
	}
	return info;
}

/* kvpool.Error and its subclasses: name, doc, bases (NULL-terminated, by state slot). */
struct error_def {
	const char *name, *doc;
	size_t slot;
	size_t base;      /* a state slot, or ~0 for OSError */
	PyObject *other;  /* a second builtin base, or NULL */
};

#define SLOT(f) offsetof(struct kvpy_state, f)
#define OSERROR_BASE ((size_t)~0)

static int add_errors(PyObject *m, struct kvpy_state *st)
{
	const struct error_def defs[] = {
		{ "Error", "Anything kvpoold or libkvpool refused; .errno, .reason (the daemon's "
			   "words, or None).", SLOT(error), OSERROR_BASE, NULL },
		{ "NoSpace", "ENOSPC: the pool is short of blocks.", SLOT(no_space), SLOT(error),
		  NULL },
		{ "QuotaExceeded", "EDQUOT: a uid's or namespace's quota.", SLOT(quota_exceeded),
		  SLOT(no_space), NULL },
		{ "NoData", "ENODATA: KV not present (dropped, never written).", SLOT(no_data),
		  SLOT(error), NULL },
		{ "PermissionDenied", "EPERM: a namespace, the admin feature, committed KV.",
		  SLOT(permission_denied), SLOT(error), PyExc_PermissionError },
		{ "NotFound", "ENODEV/ENOENT: no such pool.", SLOT(not_found), SLOT(error), NULL },
		{ "Timeout", "ETIMEDOUT: no answer within timeout_ms; the client is unusable after.",
		  SLOT(timeout), SLOT(error), PyExc_TimeoutError },
		{ "Disconnected", "ECONNRESET/ENOTCONN: the daemon is gone or the client closed.",
		  SLOT(disconnected), SLOT(error), NULL },
		{ "BatchError", "A batch's operations ran and some failed: .results holds each "
				"result, an exception in place of each failure.",
		  SLOT(batch_error), SLOT(error), NULL },
	};

	for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++) {
		PyObject **slot = (PyObject **)((char *)st + defs[i].slot);
		PyObject *base = defs[i].base == OSERROR_BASE ?
					 PyExc_OSError :
					 *(PyObject **)((char *)st + defs[i].base);
		PyObject *bases = defs[i].other ? PyTuple_Pack(2, base, defs[i].other) :
						  PyTuple_Pack(1, base);
		char qualified[64];

		if (!bases)
			return -1;
		snprintf(qualified, sizeof(qualified), "kvpool.%s", defs[i].name);
		*slot = PyErr_NewExceptionWithDoc(qualified, defs[i].doc, bases, NULL);
		Py_DECREF(bases);
		if (!*slot || PyModule_AddObjectRef(m, defs[i].name, *slot) < 0)
			return -1;
	}
	return 0;
}

static int add_type(PyObject *m, PyType_Spec *spec, PyTypeObject **slot, const char *name)
{
	*slot = (PyTypeObject *)PyType_FromModuleAndSpec(m, spec, NULL);
	if (!*slot)
		return -1;
	return name ? PyModule_AddObjectRef(m, name, (PyObject *)*slot) : 0;
}

static int module_exec(PyObject *m)
{
	struct kvpy_state *st = PyModule_GetState(m);

	if (add_errors(m, st) < 0 ||
	    add_type(m, &kvpy_client_spec, &st->client_type, "Client") < 0 ||
	    add_type(m, &kvpy_sequence_spec, &st->sequence_type, "Sequence") < 0 ||
	    add_type(m, &kvpy_batch_spec, &st->batch_type, "Batch") < 0 ||
	    add_type(m, &kvpy_mapping_spec, &st->mapping_type, "PoolMap") < 0 ||
	    add_type(m, &kvpy_region_spec, &st->region_type, "KVView") < 0 ||
	    add_type(m, &kvpy_lookup_spec, &st->lookup_type, "Lookup") < 0)
		return -1;
	st->pool_info_type = PyStructSequence_NewType(&pool_info_desc);
	if (!st->pool_info_type ||
	    PyModule_AddObjectRef(m, "PoolInfo", (PyObject *)st->pool_info_type) < 0)
		return -1;
	if (PyModule_AddStringConstant(m, "__version__", KVPOOL_VERSION) < 0 ||
	    PyModule_AddIntConstant(m, "ABI_VERSION", KVP_ABI_VERSION) < 0)
		return -1;
	return 0;
}

#define STATE_REFS(st, visit)                                                              \
	do {                                                                               \
		visit((st)->client_type);                                      \
		visit((st)->sequence_type);                                    \
		visit((st)->batch_type);                                       \
		visit((st)->mapping_type);                                     \
		visit((st)->region_type);                                      \
		visit((st)->lookup_type);                                      \
		visit((st)->pool_info_type);                                   \
		visit((st)->error); visit((st)->no_space); visit((st)->quota_exceeded);    \
		visit((st)->no_data); visit((st)->permission_denied);                      \
		visit((st)->not_found); visit((st)->timeout); visit((st)->disconnected);   \
		visit((st)->batch_error); visit((st)->np_empty); visit((st)->np_ndarray); visit((st)->json_loads);  \
	} while (0)

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
	struct kvpy_state *st = PyModule_GetState(m);

	if (st)
		STATE_REFS(st, Py_VISIT);
	return 0;
}

static int module_clear(PyObject *m)
{
	struct kvpy_state *st = PyModule_GetState(m);

	if (st)
		STATE_REFS(st, Py_CLEAR);
	return 0;
}

static void module_free(void *m)
{
	module_clear(m);
}

static PyModuleDef_Slot module_slots[] = {
	{ Py_mod_exec, module_exec },
	{ 0, NULL },
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "kvpool._kvpool",
	.m_doc = "libkvpool for Python: see the package kvpool.",
	.m_size = sizeof(struct kvpy_state),
	.m_slots = module_slots,
	.m_traverse = module_traverse,
	.m_clear = module_clear,
	.m_free = module_free,
};

PyMODINIT_FUNC PyInit__kvpool(void);
PyMODINIT_FUNC PyInit__kvpool(void)
{
	return PyModuleDef_Init(&module_def);
}
