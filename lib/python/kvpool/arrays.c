/* SPDX-License-Identifier: MIT */
/*
 * Arrays in and out. In: anything with the buffer protocol (numpy) or
 * __dlpack__ (torch CPU tensors), C-contiguous, checked for shape and dtype
 * before anything is sent. Out: numpy arrays; bf16 as uint16 holding the bits
 * (numpy has no bfloat16).
 */
#include <dlpack/dlpack.h>
#include <stdio.h>
#include <string.h>

#include "kvpool_py.h"

enum kvpy_dtype kvpy_pool_dtype(uint32_t kvp_dtype)
{
	switch (kvp_dtype) {
	case KVP_DTYPE_F32: return KVPY_F32;
	case KVP_DTYPE_F16: return KVPY_F16;
	case KVP_DTYPE_BF16: return KVPY_BF16;
	default: return KVPY_OTHER;
	}
}

const char *kvpy_dtype_name(enum kvpy_dtype t)
{
	static const char *const names[] = { "float32", "float16", "bfloat16 (or uint16 bits)",
					     "another dtype" };

	return names[t];
}

static size_t dtype_size(enum kvpy_dtype t)
{
	return t == KVPY_F32 ? 4 : 2;
}

const char *kvpy_numpy_name(enum kvpy_dtype t)
{
	static const char *const names[] = { "float32", "float16", "uint16" };

	return names[t];
}

/* A struct module format past its native byte-order prefix, if any ("<f" is "f" here). */
static const char *native_format(const char *format)
{
	return *format == '<' || *format == '=' || *format == '@' ? format + 1 : format;
}

/* A struct module format: "f", "<f", "=e"...; bf16 travels as 16-bit integers ("H", "h"). */
static enum kvpy_dtype buffer_dtype(const char *format, Py_ssize_t itemsize)
{
	if (!format)
		return KVPY_OTHER;
	format = native_format(format);
	if (!strcmp(format, "f") && itemsize == 4)
		return KVPY_F32;
	if (!strcmp(format, "e") && itemsize == 2)
		return KVPY_F16;
	if ((!strcmp(format, "H") || !strcmp(format, "h")) && itemsize == 2)
		return KVPY_BF16;
	return KVPY_OTHER;
}

static enum kvpy_dtype dl_dtype(DLDataType t)
{
	if (t.lanes != 1)
		return KVPY_OTHER;
	if (t.code == kDLFloat && t.bits == 32)
		return KVPY_F32;
	if (t.code == kDLFloat && t.bits == 16)
		return KVPY_F16;
	if ((t.code == kDLBfloat || t.code == kDLUInt || t.code == kDLInt) && t.bits == 16)
		return KVPY_BF16;
	return KVPY_OTHER;
}

static int from_buffer(PyObject *obj, const char *what, struct kvpy_array *a)
{
	if (PyObject_GetBuffer(obj, &a->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s: not a C-contiguous array", what);
		return -1;
	}
	if (a->view.ndim > 4) {
		PyErr_Format(PyExc_ValueError, "%s: %d dimensions", what, a->view.ndim);
		return -1;
	}
	a->data = a->view.buf;
	a->ndim = a->view.ndim;
	for (int i = 0; i < a->ndim; i++)
		a->shape[i] = a->view.shape[i];
	a->dtype = buffer_dtype(a->view.format, a->view.itemsize);
	return 0;
}

/* The DLPack exchange: take the capsule, rename it used, hand the tensor back when done. */
static int from_dlpack(PyObject *obj, const char *what, struct kvpy_array *a)
{
	PyObject *capsule = PyObject_CallMethod(obj, "__dlpack__", NULL);
	DLManagedTensor *mt;
	const DLTensor *t;
	int64_t expect = 1;

	if (!capsule)
		return -1;
	mt = PyCapsule_GetPointer(capsule, "dltensor");
	if (!mt) {
		Py_DECREF(capsule);
		return -1;
	}
	PyCapsule_SetName(capsule, "used_dltensor");
	Py_DECREF(capsule);
	a->dl = mt;
	t = &mt->dl_tensor;
	if (t->device.device_type != kDLCPU) {
		PyErr_Format(PyExc_ValueError, "%s: a tensor on device type %d; pass CPU memory",
			     what, (int)t->device.device_type);
		return -1;
	}
	if (t->ndim < 0 || t->ndim > 4) {
		PyErr_Format(PyExc_ValueError, "%s: %d dimensions", what, t->ndim);
		return -1;
	}
	/* C-contiguous: strides absent, or those of a dense row-major array (size-1 dims free). */
	for (int i = t->ndim - 1; i >= 0; i--) {
		if (t->strides && t->shape[i] > 1 && t->strides[i] != expect) {
			PyErr_Format(PyExc_ValueError, "%s: not C-contiguous", what);
			return -1;
		}
		expect *= t->shape[i];
	}
	a->data = (const char *)t->data + t->byte_offset;
	a->ndim = t->ndim;
	for (int i = 0; i < a->ndim; i++)
		a->shape[i] = (Py_ssize_t)t->shape[i];
	a->dtype = dl_dtype(t->dtype);
	return 0;
}

void kvpy_array_release(struct kvpy_array *a)
{
	if (a->view.obj)
		PyBuffer_Release(&a->view);
	if (a->dl) {
		DLManagedTensor *mt = a->dl;

		if (mt->deleter)
			mt->deleter(mt);
	}
	memset(a, 0, sizeof(*a));
}

size_t kvpy_array_bytes(const struct kvpy_array *a)
{
	size_t n = dtype_size(a->dtype);

	for (int i = 0; i < a->ndim; i++)
		n *= (size_t)a->shape[i];
	return n;
}

/* ValueError: @a's shape, and the one wanted (n < 0: any rows, heads < 0: any heads). */
static void shape_error(const struct kvpy_array *a, const char *what, Py_ssize_t n,
			Py_ssize_t heads, Py_ssize_t dim)
{
	char rows[24] = "n", cols[24] = "q_heads", want[64];

	if (n >= 0)
		snprintf(rows, sizeof(rows), "%zd", n);
	if (heads >= 0)
		snprintf(cols, sizeof(cols), "%zd", heads);
	snprintf(want, sizeof(want), "%s, %s, %zd", rows, cols, dim);
	if (a->ndim == 3)
		PyErr_Format(PyExc_ValueError, "%s: shape (%zd, %zd, %zd), expected (%s)", what,
			     a->shape[0], a->shape[1], a->shape[2], want);
	else
		PyErr_Format(PyExc_ValueError, "%s: %d dimensions, expected 3: (%s)", what, a->ndim,
			     want);
}

int kvpy_array_get(PyObject *obj, const char *what, Py_ssize_t n, Py_ssize_t heads,
		   Py_ssize_t dim, enum kvpy_dtype dtype, struct kvpy_array *a)
{
	int ret;

	memset(a, 0, sizeof(*a));
	/* numpy has both: its buffer is the cheaper door. */
	if (PyObject_CheckBuffer(obj))
		ret = from_buffer(obj, what, a);
	else if (PyObject_HasAttrString(obj, "__dlpack__"))
		ret = from_dlpack(obj, what, a);
	else {
		PyErr_Format(PyExc_ValueError,
			     "%s: not an array (neither the buffer protocol nor __dlpack__)", what);
		ret = -1;
	}
	if (ret == 0 && (a->ndim != 3 || (n >= 0 && a->shape[0] != n) ||
			 (heads >= 0 && a->shape[1] != heads) || a->shape[2] != dim)) {
		shape_error(a, what, n, heads, dim);
		ret = -1;
	}
	if (ret == 0 && a->dtype != dtype) {
		PyErr_Format(PyExc_ValueError, "%s: dtype is not %s", what, kvpy_dtype_name(dtype));
		ret = -1;
	}
	if (ret == 0 && a->shape[0] == 0) {
		PyErr_Format(PyExc_ValueError, "%s: no rows", what);
		ret = -1;
	}
	if (ret < 0)
		kvpy_array_release(a);
	return ret;
}

PyObject *kvpy_array_new(struct kvpy_state *st, enum kvpy_dtype dtype, Py_ssize_t n,
			 Py_ssize_t heads, Py_ssize_t dim, void **data)
{
	PyObject *arr;
	Py_buffer view;

	if (!kvpy_import_attr(&st->np_empty, "numpy", "empty"))
		return NULL;
	arr = PyObject_CallFunction(st->np_empty, "(nnn)s", n, heads, dim, kvpy_numpy_name(dtype));
	if (!arr)
		return NULL;
	if (PyObject_GetBuffer(arr, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
		Py_DECREF(arr);
		return NULL;
	}
	/* A numpy array's data does not move while the array lives. */
	*data = view.buf;
	PyBuffer_Release(&view);
	return arr;
}

/* A 1-D buffer of integers (numpy's): each must fit a token id. */
static int tokens_from_buffer(PyObject *obj, uint32_t **tokens, uint32_t *n)
{
	const char *f;
	Py_buffer view;
	uint32_t *t;
	int ret = -1;

	if (PyObject_GetBuffer(obj, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
		return -1;
	f = native_format(view.format ? view.format : "B");
	if (view.ndim != 1 || strlen(f) != 1 || !strchr("bBhHiIlLqQ", *f) || view.len < 0 ||
	    view.shape[0] > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError, "tokens: a 1-D array of integers is needed");
		goto release;
	}
	t = PyMem_Malloc((size_t)(view.shape[0] ? view.shape[0] : 1) * sizeof(*t));
	if (!t) {
		PyErr_NoMemory();
		goto release;
	}
	for (Py_ssize_t i = 0; i < view.shape[0]; i++) {
		const char *at = (const char *)view.buf + i * view.itemsize;
		bool is_signed = *f >= 'a';
		long long v = 0;
		unsigned long long u = 0;

		switch (view.itemsize) {
		case 1: v = is_signed ? *(const int8_t *)at : *(const uint8_t *)at; break;
		case 2: v = is_signed ? *(const int16_t *)at : *(const uint16_t *)at; break;
		case 4: v = is_signed ? *(const int32_t *)at : (long long)*(const uint32_t *)at; break;
		default:
			if (is_signed)
				v = *(const int64_t *)at;
			else
				u = *(const uint64_t *)at, v = u > UINT32_MAX ? -1 : (long long)u;
		}
		if (v < 0 || v > UINT32_MAX) {
			PyErr_Format(PyExc_ValueError, "tokens[%zd]: not in 0..4294967295", i);
			PyMem_Free(t);
			goto release;
		}
		t[i] = (uint32_t)v;
	}
	*tokens = t;
	*n = (uint32_t)view.shape[0];
	ret = 0;
release:
	PyBuffer_Release(&view);
	return ret;
}

int kvpy_tokens(PyObject *obj, uint32_t **tokens, uint32_t *n)
{
	PyObject *it, *item;
	size_t len = 0, cap = 64;
	uint32_t *t;

	if (PyObject_CheckBuffer(obj) && !PyBytes_Check(obj) && !PyByteArray_Check(obj))
		return tokens_from_buffer(obj, tokens, n);
	it = PyObject_GetIter(obj);
	if (!it) {
		PyErr_Clear();
		PyErr_SetString(PyExc_ValueError, "tokens: an iterable of ints is needed");
		return -1;
	}
	t = PyMem_Malloc(cap * sizeof(*t));
	if (!t) {
		PyErr_NoMemory();
		goto drop_iter;
	}
	while ((item = PyIter_Next(it))) {
		uint32_t id;
		int ok = kvpy_u32(item, &id);

		Py_DECREF(item);
		if (!ok) {
			PyErr_Clear();
			PyErr_Format(PyExc_ValueError, "tokens[%zu]: not an int in 0..4294967295", len);
			goto free_tokens;
		}
		if (len == cap) {
			uint32_t *grown = len < UINT32_MAX ? PyMem_Realloc(t, 2 * cap * sizeof(*t)) : NULL;

			if (!grown) {
				PyErr_SetString(PyExc_ValueError, "tokens: too many");
				goto free_tokens;
			}
			t = grown;
			cap *= 2;
		}
		t[len++] = id;
	}
	if (PyErr_Occurred())
		goto free_tokens;
	Py_DECREF(it);
	*tokens = t;
	*n = (uint32_t)len;
	return 0;

free_tokens:
	PyMem_Free(t);
drop_iter:
	Py_DECREF(it);
	return -1;
}
