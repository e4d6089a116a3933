/* SPDX-License-Identifier: MIT */
/*
 * kvpool.PoolMap and kvpool.KVView: the attached pool's memory mapped into
 * this process (kvp_map_pool) and one layer's K or V of it as a strided view
 * [num_blocks][block_size][kv_heads][head_dim], without a copy. Host pools
 * give writable numpy arrays over it (the KVView's buffer), cuda pools the
 * KVView itself (DLPack: torch.from_dlpack makes it a cuda tensor). Every view holds a reference
 * to its PoolMap, so the memory stays mapped while any view lives.
 */
#include <dlpack/dlpack.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool_py.h"

typedef struct {
	PyObject_HEAD
	struct kvpy_state *st;
	struct kvp_pool_map map;
	bool mapped;
} MappingObject;

typedef struct {
	PyObject_HEAD
	MappingObject *owner;
	uint64_t data;          /* host address or CUdeviceptr */
	int64_t shape[4], strides[4]; /* strides in elements, as DLPack has them */
	DLDataType dtype;
	DLDevice device;
} RegionObject;

/* What a capsule carries: the tensor and the arrays it points to. */
struct dl_export {
	DLManagedTensor mt;
	int64_t shape[4], strides[4];
};

PyObject *kvpy_map(ClientObject *client)
{
	PyTypeObject *type = client->st->mapping_type;
	MappingObject *self;
	int ret;

	self = (MappingObject *)kvpy_alloc(type);
	if (!self)
		return NULL;
	self->st = client->st;
	KVPY_LOCKED_CALL(client, ret, kvp_map_pool(client->c, &self->map));
	if (ret < 0) {
		if (ret != INT32_MIN)
			kvpy_raise(client->st, ret, "map", self->map.why);
		Py_DECREF(self);
		return NULL;
	}
	self->mapped = true;
	return (PyObject *)self;
}

static void mapping_dealloc(MappingObject *self)
{
	if (self->mapped)
		kvp_unmap_pool(&self->map);
	kvpy_free(self);
}

static RegionObject *region_new(MappingObject *owner, uint64_t data,
				const struct kvp_map_layer *l)
{
	const struct kvp_kv_layout *lay = &owner->map.layout;
	PyTypeObject *type = owner->st->region_type;
	RegionObject *r = (RegionObject *)kvpy_alloc(type);
	uint64_t esize = lay->dtype == KVP_DTYPE_F32 ? 4 : 2;
	bool cuda = lay->mem_kind == KVP_MEM_CUDA;

	if (!r)
		return NULL;
	r->owner = (MappingObject *)Py_NewRef((PyObject *)owner);
	r->data = data;
	r->shape[0] = lay->num_blocks;
	r->shape[1] = lay->block_size;
	r->shape[2] = lay->kv_heads;
	r->shape[3] = lay->head_dim;
	r->strides[0] = (int64_t)(l->block_stride / esize);
	r->strides[1] = (int64_t)(l->token_stride / esize);
	r->strides[2] = (int64_t)(l->head_stride / esize);
	r->strides[3] = 1;
	/* numpy has no bfloat16: on the host the bits come as uint16, as read_kv gives them. */
	r->dtype = (DLDataType){ .code = lay->dtype != KVP_DTYPE_BF16 ? kDLFloat :
					 cuda ? kDLBfloat : kDLUInt,
				 .bits = (uint8_t)(8 * esize), .lanes = 1 };
	r->device = (DLDevice){ .device_type = cuda ? kDLCUDA : kDLCPU,
				.device_id = cuda ? (int32_t)lay->device : 0 };
	return r;
}

static size_t region_esize(const RegionObject *r)
{
	return r->dtype.bits / 8;
}

/* Bytes from element 0 to the end of the last: what the strided view spans. */
static Py_ssize_t region_extent(const RegionObject *r)
{
	int64_t last = 0;

	for (int i = 0; i < 4; i++)
		last += (r->shape[i] - 1) * r->strides[i];
	return (Py_ssize_t)((last + 1) * (int64_t)region_esize(r));
}

/*
 * numpy.ndarray over the region's bytes (its buffer: writable, unlike what
 * numpy.from_dlpack makes), shaped and strided as the layout says.
 */
static PyObject *host_array(struct kvpy_state *st, RegionObject *r)
{
	const char *dtype = kvpy_numpy_name(kvpy_pool_dtype(r->owner->map.layout.dtype));
	int64_t es = (int64_t)region_esize(r);
	PyObject *args, *kwargs, *arr;

	if (!kvpy_import_attr(&st->np_ndarray, "numpy", "ndarray"))
		return NULL;
	args = Py_BuildValue("((LLLL)s)", (long long)r->shape[0], (long long)r->shape[1],
			     (long long)r->shape[2], (long long)r->shape[3], dtype);
	kwargs = Py_BuildValue("{s:O,s:(LLLL)}", "buffer", (PyObject *)r, "strides",
			       (long long)(r->strides[0] * es), (long long)(r->strides[1] * es),
			       (long long)(r->strides[2] * es), (long long)(r->strides[3] * es));
	arr = args && kwargs ? PyObject_Call(st->np_ndarray, args, kwargs) : NULL;
	Py_XDECREF(args);
	Py_XDECREF(kwargs);
	return arr;
}

static PyObject *mapping_kv_cache(MappingObject *self, PyObject *arg)
{
	long layer = PyLong_AsLong(arg);
	const struct kvp_map_layer *l;
	RegionObject *k, *v;
	PyObject *out;

	if (layer == -1 && PyErr_Occurred())
		return NULL;
	if (layer < 0 || layer >= (long)self->map.layout.num_layers)
		return PyErr_Format(PyExc_ValueError, "kv_cache: layer %ld: the pool has %u", layer,
				    self->map.layout.num_layers);
	l = &self->map.layers[layer];
	k = region_new(self, (uint64_t)(uintptr_t)l->k, l);
	v = k ? region_new(self, (uint64_t)(uintptr_t)l->v, l) : NULL;
	if (!v) {
		Py_XDECREF((PyObject *)k);
		return NULL;
	}
	if (self->map.layout.mem_kind == KVP_MEM_CUDA)
		return Py_BuildValue("(NN)", (PyObject *)k, (PyObject *)v);
	/* Host memory: writable numpy arrays over it, each keeping its view (so the map) alive. */
	out = Py_BuildValue("(NN)", host_array(self->st, k), host_array(self->st, v));
	Py_DECREF((PyObject *)k);
	Py_DECREF((PyObject *)v);
	return out;
}

#define LAYOUT_GETTER(field)                                                               \
	static PyObject *mapping_get_##field(MappingObject *self, void *closure)           \
	{                                                                                  \
		(void)closure;                                                             \
		return PyLong_FromUnsignedLongLong(self->map.layout.field);                \
	}
LAYOUT_GETTER(num_layers)
LAYOUT_GETTER(num_blocks)
LAYOUT_GETTER(block_size)
LAYOUT_GETTER(kv_heads)
LAYOUT_GETTER(head_dim)
LAYOUT_GETTER(device)
LAYOUT_GETTER(num_pieces)
LAYOUT_GETTER(total_bytes)

static PyObject *mapping_get_memory(MappingObject *self, void *closure)
{
	(void)closure;
	return PyUnicode_FromString(self->map.layout.mem_kind == KVP_MEM_CUDA ? "cuda" : "host");
}

static PyObject *mapping_get_layout(MappingObject *self, void *closure)
{
	(void)closure;
	return PyUnicode_FromString(self->map.layout.layout == KVP_LAYOUT_LAYER ? "layer" : "block");
}

static PyObject *mapping_get_dtype(MappingObject *self, void *closure)
{
	(void)closure;
	return PyUnicode_FromString(kvpy_dtype_label(self->map.layout.dtype));
}

static PyMethodDef mapping_methods[] = {
	{ "kv_cache", (PyCFunction)mapping_kv_cache, METH_O,
	  "kv_cache(layer)\n--\n\n(K, V) of layer LAYER (of every group): views\n"
	  "[num_blocks][block_size][kv_heads][head_dim] of the pool's memory, strided as\n"
	  "POOL_LAYOUT says, no copy. numpy arrays for a host pool (bf16 as uint16),\n"
	  "KVViews (__dlpack__: torch.from_dlpack) for a cuda pool." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef mapping_getset[] = {
	{ "memory", (getter)mapping_get_memory, NULL, "'host' or 'cuda'.", NULL },
	{ "layout", (getter)mapping_get_layout, NULL, "'block' or 'layer'.", NULL },
	{ "dtype", (getter)mapping_get_dtype, NULL, "'f32' 'f16' or 'bf16'.", NULL },
	{ "num_layers", (getter)mapping_get_num_layers, NULL, "Layers per group.", NULL },
	{ "num_blocks", (getter)mapping_get_num_blocks, NULL, NULL, NULL },
	{ "block_size", (getter)mapping_get_block_size, NULL, NULL, NULL },
	{ "kv_heads", (getter)mapping_get_kv_heads, NULL, NULL, NULL },
	{ "head_dim", (getter)mapping_get_head_dim, NULL, NULL, NULL },
	{ "device", (getter)mapping_get_device, NULL, "The CUDA ordinal (0 for host).", NULL },
	{ "num_pieces", (getter)mapping_get_num_pieces, NULL, NULL, NULL },
	{ "total_bytes", (getter)mapping_get_total_bytes, NULL, NULL, NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot mapping_slots[] = {
	{ Py_tp_dealloc, mapping_dealloc },
	{ Py_tp_methods, mapping_methods },
	{ Py_tp_getset, mapping_getset },
	{ Py_tp_doc, "The attached pool's memory mapped here (Client.map()); unmapped once it "
		     "and every view of it are gone." },
	{ 0, NULL },
};

PyType_Spec kvpy_mapping_spec = {
	.name = "kvpool.PoolMap",
	.basicsize = sizeof(MappingObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = mapping_slots,
};

/* ---- KVView: DLPack producer ---- */

static void region_dealloc(RegionObject *self)
{
	Py_DECREF((PyObject *)self->owner);
	kvpy_free(self);
}

/* The consumer is done: it may call this from any thread, with or without the GIL. */
static void dl_deleter(DLManagedTensor *mt)
{
	PyGILState_STATE gil = PyGILState_Ensure();

	Py_DECREF((PyObject *)mt->manager_ctx);
	free(mt);
	PyGILState_Release(gil);
}

/* A capsule never consumed still owns its tensor. */
static void capsule_destructor(PyObject *capsule)
{
	DLManagedTensor *mt;

	if (!PyCapsule_IsValid(capsule, "dltensor"))
		return;
	mt = PyCapsule_GetPointer(capsule, "dltensor");
	if (mt && mt->deleter)
		mt->deleter(mt);
}

static PyObject *region_dlpack(RegionObject *self, PyObject *args, PyObject *kwds)
{
	struct dl_export *e;
	PyObject *capsule;

	/* stream, max_version, dl_device, copy: the memory is ready and stays where it is. */
	(void)args;
	(void)kwds;
	e = calloc(1, sizeof(*e));
	if (!e)
		return PyErr_NoMemory();
	memcpy(e->shape, self->shape, sizeof(e->shape));
	memcpy(e->strides, self->strides, sizeof(e->strides));
	e->mt.dl_tensor = (DLTensor){ .data = (void *)(uintptr_t)self->data,
				      .device = self->device, .ndim = 4, .dtype = self->dtype,
				      .shape = e->shape, .strides = e->strides };
	e->mt.manager_ctx = Py_NewRef((PyObject *)self);
	e->mt.deleter = dl_deleter;
	capsule = PyCapsule_New(&e->mt, "dltensor", capsule_destructor);
	if (!capsule) {
		Py_DECREF((PyObject *)self);
		free(e);
	}
	return capsule;
}

/* A host region's bytes, writable: what host_array builds on. */
static int region_getbuffer(RegionObject *self, Py_buffer *view, int flags)
{
	if (self->device.device_type != kDLCPU) {
		PyErr_SetString(PyExc_BufferError, "a cuda view: use __dlpack__ (torch.from_dlpack)");
		view->obj = NULL;
		return -1;
	}
	return PyBuffer_FillInfo(view, (PyObject *)self, (void *)(uintptr_t)self->data,
				 region_extent(self), 0, flags);
}

static PyObject *region_dlpack_device(RegionObject *self, PyObject *unused)
{
	(void)unused;
	return Py_BuildValue("(ii)", (int)self->device.device_type, (int)self->device.device_id);
}

static PyObject *region_get_shape(RegionObject *self, void *closure)
{
	(void)closure;
	return Py_BuildValue("(LLLL)", (long long)self->shape[0], (long long)self->shape[1],
			     (long long)self->shape[2], (long long)self->shape[3]);
}

static PyObject *region_get_data_ptr(RegionObject *self, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLongLong(self->data);
}

static PyMethodDef region_methods[] = {
	{ "__dlpack__", (PyCFunction)(void (*)(void))region_dlpack, METH_VARARGS | METH_KEYWORDS,
	  "__dlpack__(stream=None)\n--\n\nA DLPack capsule of this view (no copy)." },
	{ "__dlpack_device__", (PyCFunction)region_dlpack_device, METH_NOARGS,
	  "__dlpack_device__()\n--\n\n(device type, ordinal): (1, 0) host, (2, N) cuda." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef region_getset[] = {
	{ "shape", (getter)region_get_shape, NULL,
	  "(num_blocks, block_size, kv_heads, head_dim)", NULL },
	{ "data_ptr", (getter)region_get_data_ptr, NULL, "Where element 0 lies.", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot region_slots[] = {
	{ Py_tp_dealloc, region_dealloc },
	{ Py_bf_getbuffer, region_getbuffer },
	{ Py_tp_methods, region_methods },
	{ Py_tp_getset, region_getset },
	{ Py_tp_doc, "One layer's K or V in a PoolMap, for DLPack consumers (torch.from_dlpack, "
		     "numpy.from_dlpack)." },
	{ 0, NULL },
};

PyType_Spec kvpy_region_spec = {
	.name = "kvpool.KVView",
	.basicsize = sizeof(RegionObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = region_slots,
};
