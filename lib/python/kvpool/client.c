/* SPDX-License-Identifier: MIT */
/* kvpool.Client: one connection to kvpoold (libkvpool's struct kvp_client) and its lock. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool_py.h"

/* An arena for a prefill's KV; only address space until touched. */
#define DEFAULT_ARENA_BYTES (16ull << 20)

/* The lock, waited for with the GIL dropped when another thread holds it. */
static void take_lock(ClientObject *self)
{
	if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
		Py_BEGIN_ALLOW_THREADS
		PyThread_acquire_lock(self->lock, WAIT_LOCK);
		Py_END_ALLOW_THREADS
	}
}

int kvpy_lock(ClientObject *self)
{
	take_lock(self);
	if (!self->c) {
		PyThread_release_lock(self->lock);
		kvpy_raise(self->st, -ENOTCONN, "client", "closed");
		return -1;
	}
	while (self->ndrops)
		kvp_lookup_drop(self->c, self->drops[--self->ndrops]);
	return 0;
}

void kvpy_unlock(ClientObject *self)
{
	PyThread_release_lock(self->lock);
}

const struct kvp_pool_info *kvpy_pool(ClientObject *self)
{
	const struct kvp_pool_info *p;

	if (!self->c) {
		kvpy_raise(self->st, -ENOTCONN, "client", "closed");
		return NULL;
	}
	p = kvp_pool_info(self->c);
	if (self->pool_name == Py_None || !p->kv_heads) {
		PyErr_SetString(PyExc_ValueError, self->pool_name == Py_None ?
						  "no pool attached" :
						  "the attached pool holds no KV (kv_heads 0)");
		return NULL;
	}
	return p;
}

/* A connection with the client's settings to @pool (NULL: none) into *@c; 0, or raises. */
static int dial(ClientObject *self, const char *pool, struct kvp_client **c)
{
	char why[KVP_REASON_MAX], what[KVP_NAME_MAX + 128];
	const char *socket_path = self->socket_path;
	struct kvp_connect_opts opts = { .socket_path = socket_path, .pool = pool,
					 .namespace_ = self->namespace_,
					 .sq_entries = KVPY_SQ_ENTRIES, .arena_bytes = self->arena,
					 .spin_us = self->spin_us, .admin = self->admin,
					 .stats_page = true, .timeout_ms = self->timeout_ms,
					 .pool_map = true, .why = why, .why_len = sizeof(why) };
	int ret;

	Py_BEGIN_ALLOW_THREADS
	ret = kvp_connect(&opts, c);
	Py_END_ALLOW_THREADS
	if (!ret)
		return 0;
	if (!socket_path)
		socket_path = getenv("KVPOOL_SOCKET") ?: KVP_DEFAULT_SOCKET;
	snprintf(what, sizeof(what), "connect %s%s%s", socket_path, pool ? " pool " : "",
		 pool ? pool : "");
	/* No daemon there (ENOENT, ECONNREFUSED): not an unknown pool, whatever the errno. */
	if (ret == -ENOENT || ret == -ECONNREFUSED)
		kvpy_raise_as(self->st->error, ret, what, "is kvpoold running?");
	else
		kvpy_raise(self->st, ret, what, why);
	*c = NULL;
	return -1;
}

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "socket", "pool", "namespace", "admin", "timeout_ms", "spin_us",
				  "arena_bytes", NULL };
	const char *socket_path = NULL, *pool = NULL, *ns = "";
	int admin = 0;
	unsigned timeout_ms = 0, spin_us = 0;
	unsigned long long arena = DEFAULT_ARENA_BYTES;
	ClientObject *self;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|zzspO&$O&K:Client", kwlist, &socket_path,
					 &pool, &ns, &admin, kvpy_u32, &timeout_ms, kvpy_u32, &spin_us,
					 &arena))
		return NULL;
	self = (ClientObject *)kvpy_alloc(type);
	if (!self)
		return NULL;
	self->st = PyType_GetModuleState(type);
	self->pool_name = pool && *pool ? PyUnicode_FromString(pool) : Py_NewRef(Py_None);
	self->lock = PyThread_allocate_lock();
	self->socket_path = socket_path ? strdup(socket_path) : NULL;
	if (!self->pool_name || !self->lock || (socket_path && !self->socket_path)) {
		Py_DECREF(self);
		return PyErr_NoMemory();
	}
	snprintf(self->namespace_, sizeof(self->namespace_), "%s", ns);
	self->admin = admin;
	self->timeout_ms = timeout_ms;
	self->spin_us = spin_us;
	self->arena = arena;
	if (dial(self, pool, &self->c)) {
		Py_DECREF(self);
		return NULL;
	}
	kvp_arena(self->c, &self->arena_bytes);
	return (PyObject *)self;
}

/*
 * A new connection with the same settings, to the pool attached now: after a
 * daemon's restart, or a Disconnected. The old one's sequences and lookups
 * are gone with it (their next call raises Disconnected). Returns the pool's
 * generation (the same as before: the same pool, its cache kept; another:
 * made again, empty), or None without a pool.
 */
static PyObject *client_reconnect(ClientObject *self, PyObject *unused)
{
	struct kvp_client *old, *c = NULL;
	const char *pool = NULL;
	int ret;

	(void)unused;
	if (self->pool_name != Py_None && !(pool = PyUnicode_AsUTF8AndSize(self->pool_name, NULL)))
		return NULL;
	take_lock(self);
	old = self->c;
	self->c = NULL;
	self->epoch++;
	self->ndrops = 0; /* tickets of the old connection */
	if (old) {
		Py_BEGIN_ALLOW_THREADS
		kvp_close(old);
		Py_END_ALLOW_THREADS
	}
	ret = dial(self, pool, &c);
	if (!ret) {
		self->c = c;
		kvp_arena(self->c, &self->arena_bytes);
	}
	kvpy_unlock(self);
	if (ret)
		return NULL;
	if (!pool)
		Py_RETURN_NONE;
	return PyLong_FromUnsignedLongLong(kvp_pool_generation(self->c));
}

static void client_dealloc(ClientObject *self)
{
	if (self->c)
		kvp_close(self->c);
	if (self->lock)
		PyThread_free_lock(self->lock);
	Py_XDECREF(self->pool_name);
	free(self->socket_path);
	kvpy_free(self);
}

static PyObject *client_close(ClientObject *self, PyObject *unused)
{
	struct kvp_client *c;

	(void)unused;
	take_lock(self);
	c = self->c;
	self->c = NULL;
	if (c) {
		Py_BEGIN_ALLOW_THREADS
		kvp_close(c);
		Py_END_ALLOW_THREADS
	}
	kvpy_unlock(self);
	Py_RETURN_NONE;
}

static PyObject *client_enter(PyObject *self, PyObject *unused)
{
	(void)unused;
	return Py_NewRef(self);
}

static PyObject *client_exit(ClientObject *self, PyObject *args)
{
	(void)args;
	return client_close(self, NULL);
}

static PyObject *client_get_pool(ClientObject *self, void *closure)
{
	(void)closure;
	return kvpy_pool_info(self);
}

static PyObject *client_get_closed(ClientObject *self, void *closure)
{
	(void)closure;
	return PyBool_FromLong(!self->c);
}

static PyObject *client_get_features(ClientObject *self, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLongLong(self->c ? kvp_features(self->c) : 0);
}

static PyObject *client_get_boot_id(ClientObject *self, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLongLong(self->c ? kvp_boot_id(self->c) : 0);
}

static PyObject *client_nop(ClientObject *self, PyObject *unused)
{
	int ret;

	(void)unused;
	KVPY_LOCKED_CALL(self, ret, kvp_nop(self->c));
	if (ret == INT32_MIN)
		return NULL;
	if (ret < 0)
		return kvpy_raise(self->st, ret, "nop", NULL);
	Py_RETURN_NONE;
}

static PyObject *client_stats(ClientObject *self, PyObject *unused)
{
	struct kvp_stats_view view = { 0 };
	PyObject *text, *dict;
	char *json = NULL;
	int ret;

	(void)unused;
	KVPY_LOCKED_CALL(self, ret, kvp_stats_view_take(self->c, &view));
	if (ret == INT32_MIN)
		goto release_view;
	if (ret < 0) {
		kvpy_raise(self->st, ret, "stats", NULL);
		goto release_view;
	}
	json = kvp_stats_json(&view, false);
	kvp_stats_view_release(&view);
	if (!json)
		return PyErr_NoMemory();
	if (!kvpy_import_attr(&self->st->json_loads, "json", "loads")) {
		free(json);
		return NULL;
	}
	text = PyUnicode_FromString(json);
	free(json);
	if (!text)
		return NULL;
	dict = PyObject_CallFunctionObjArgs(self->st->json_loads, text, NULL);
	Py_DECREF(text);
	return dict;

release_view:
	kvp_stats_view_release(&view);
	return NULL;
}

static PyObject *client_attach(ClientObject *self, PyObject *args)
{
	PyObject *name;
	char what[KVP_NAME_MAX + 16];
	int ret;

	if (!PyArg_ParseTuple(args, "U:attach", &name))
		return NULL;
	KVPY_LOCKED_CALL(self, ret, kvp_attach(self->c, PyUnicode_AsUTF8AndSize(name, NULL)));
	if (ret == INT32_MIN)
		return NULL;
	if (ret < 0) {
		snprintf(what, sizeof(what), "attach %.*s", KVP_NAME_MAX,
			 PyUnicode_AsUTF8AndSize(name, NULL));
		return kvpy_raise(self->st, ret, what, NULL);
	}
	/* "" detaches. */
	KVPY_SETREF(self->pool_name, Py_NewRef(PyUnicode_GetLength(name) ? name : Py_None));
	Py_RETURN_NONE;
}

static PyObject *client_open(ClientObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "tokens", "salt", "prefix", NULL };
	PyObject *tokens_obj, *salt_obj = Py_None, *prefix_obj = Py_None;
	const char *salt = NULL;
	Py_ssize_t salt_len = 0;
	long long prefix = -1;
	uint32_t *tokens, n;
	uint64_t handle;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OO:open", kwlist, &tokens_obj, &salt_obj,
					 &prefix_obj))
		return NULL;
	if (salt_obj != Py_None) {
		if (PyUnicode_Check(salt_obj))
			salt = PyUnicode_AsUTF8AndSize(salt_obj, &salt_len);
		else if (PyBytes_Check(salt_obj))
			PyBytes_AsStringAndSize(salt_obj, (char **)&salt, &salt_len);
		else
			return PyErr_Format(PyExc_ValueError, "salt: str or bytes, not %R",
					    (PyObject *)Py_TYPE(salt_obj));
		if (!salt)
			return NULL;
	}
	if (prefix_obj != Py_None) {
		prefix = PyLong_AsLongLong(prefix_obj);
		if (prefix == -1 && PyErr_Occurred())
			return NULL;
		if (prefix < 0 || prefix > UINT32_MAX)
			return PyErr_Format(PyExc_ValueError, "prefix %lld: must be 0..2**32-1",
					    prefix);
	}
	if (kvpy_tokens(tokens_obj, &tokens, &n) < 0)
		return NULL;
	KVPY_LOCKED_CALL(self, ret, kvp_seq_open(self->c, tokens, n, salt, (uint32_t)salt_len,
					    prefix, &handle));
	PyMem_Free(tokens);
	if (ret == INT32_MIN)
		return NULL;
	if (ret < 0)
		return kvpy_raise(self->st, ret, "open", NULL);
	return kvpy_sequence_new(self, handle);
}

static PyObject *client_batch(ClientObject *self, PyObject *unused)
{
	(void)unused;
	return kvpy_batch_new(self);
}

static PyObject *client_map(ClientObject *self, PyObject *unused)
{
	(void)unused;
	return kvpy_map(self);
}

static PyObject *client_pool_sync(ClientObject *self, PyObject *args)
{
	const char *name = NULL;
	int ret;

	if (!PyArg_ParseTuple(args, "|z", &name))
		return NULL;
	KVPY_LOCKED_CALL(self, ret, kvp_pool_sync(self->c, name));
	if (ret == INT32_MIN)
		return NULL;
	if (ret < 0)
		return kvpy_raise(self->st, ret, "pool_sync", NULL);
	Py_RETURN_NONE;
}

static PyObject *client_pool_purge_remote(ClientObject *self, PyObject *args)
{
	const char *name = NULL;
	uint64_t purged = 0;
	int ret;

	if (!PyArg_ParseTuple(args, "|z", &name))
		return NULL;
	KVPY_LOCKED_CALL(self, ret, kvp_pool_purge_remote(self->c, name, &purged));
	if (ret == INT32_MIN)
		return NULL;
	if (ret < 0)
		return kvpy_raise(self->st, ret, "pool_purge_remote", NULL);
	return PyLong_FromUnsignedLongLong(purged);
}

/* Admin: the attached pool's blocks @ids forget their cache hash (EVICT). */
static PyObject *client_evict(ClientObject *self, PyObject *arg)
{
	Py_ssize_t n;
	uint32_t *ids;
	int ret;

	if (!PyList_Check(arg))
		return PyErr_Format(PyExc_TypeError, "evict: a list of block ids");
	n = PyList_Size(arg);
	ids = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(*ids));
	if (!ids)
		return PyErr_NoMemory();
	for (Py_ssize_t i = 0; i < n; i++) {
		unsigned long v = PyLong_AsUnsignedLong(PyList_GetItem(arg, i));

		if ((v == (unsigned long)-1 && PyErr_Occurred()) || v > UINT32_MAX) {
			PyMem_Free(ids);
			return PyErr_Occurred() ? NULL :
			       PyErr_Format(PyExc_OverflowError, "evict: block id %lu", v);
		}
		ids[i] = (uint32_t)v;
	}
	KVPY_LOCKED_CALL(self, ret, kvp_evict(self->c, ids, (uint32_t)n));
	PyMem_Free(ids);
	if (ret == INT32_MIN)
		return NULL;
	if (ret < 0)
		return kvpy_raise(self->st, ret, "evict", NULL);
	return PyLong_FromLong(ret);
}

/* Admin: the attached pool's free queue, head first (DUMP_FREEQ). */
static PyObject *client_free_queue(ClientObject *self, PyObject *unused)
{
	uint32_t *ids = NULL, none;
	PyObject *list;
	int ret, n = 0;

	(void)unused;
	for (;;) {
		KVPY_LOCKED_CALL(self, ret, kvp_dump_freeq(self->c, ids ? ids : &none, (uint32_t)n));
		if (ret == INT32_MIN || ret < 0 || ret <= n)
			break;
		n = ret;
		PyMem_Free(ids);
		ids = PyMem_Malloc((size_t)n * sizeof(*ids));
		if (!ids)
			return PyErr_NoMemory();
	}
	if (ret == INT32_MIN || ret < 0) {
		PyMem_Free(ids);
		return ret < 0 && ret != INT32_MIN ? kvpy_raise(self->st, ret, "free_queue", NULL) :
						     NULL;
	}
	list = PyList_New(ret);
	for (int i = 0; list && i < ret; i++)
		PyList_SetItem(list, i, PyLong_FromUnsignedLong(ids[i]));
	PyMem_Free(ids);
	return list;
}

static PyMethodDef client_methods[] = {
	{ "close", (PyCFunction)client_close, METH_NOARGS,
	  "close()\n--\n\nClose the connection; the daemon closes the sequences left open." },
	{ "reconnect", (PyCFunction)client_reconnect, METH_NOARGS,
	  "reconnect()\n--\n\nConnect again with the same socket, pool, namespace and settings\n"
	  "(after a daemon's restart, or a Disconnected); the old connection's sequences\n"
	  "and lookups are gone with it. Returns the pool's generation (unchanged: the same\n"
	  "pool and its cache; another: made again, empty), or None without a pool." },
	{ "__enter__", client_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)client_exit, METH_VARARGS, NULL },
	{ "nop", (PyCFunction)client_nop, METH_NOARGS,
	  "nop()\n--\n\nA round trip through the daemon that does nothing." },
	{ "stats", (PyCFunction)client_stats, METH_NOARGS,
	  "stats()\n--\n\nThe daemon's stats: the dict `kvctl stats --json` prints." },
	{ "attach", (PyCFunction)client_attach, METH_VARARGS,
	  "attach(name)\n--\n\nAttach to pool NAME (no sequence may be open)." },
	{ "create_pool", (PyCFunction)(void (*)(void))kvpy_create_pool,
	  METH_VARARGS | METH_KEYWORDS,
	  "create_pool(name, blocks, block_size, groups, kv_heads=0, head_dim=0,\n"
	  "            layers_per_group=1, dtype='bf16', max_len=None, namespace='',\n"
	  "            backend='host', layout=None, owned=False, *, device=None,\n"
	  "            max_step_tokens=None, keys=None)\n--\n\n"
	  "Create a pool (needs admin=True). groups: [('full', 0), ('swa', 128)].\n"
	  "owned: the pool is destroyed once this client is gone and nothing uses it.\n"
	  "max_step_tokens: the most tokens one alloc adds (sizes cyclic rings; default 1).\n"
	  "keys: 'key = value' lines of kvpool.conf(5)'s [pool.NAME] keys, which the daemon\n"
	  "applies over the arguments (POOL_CREATE v3), refusing any it does not take." },
	{ "pool_sync", (PyCFunction)client_pool_sync, METH_VARARGS,
	  "pool_sync(name=None)\n--\n\nWait until every copy into pool NAME's tier (None: the\n"
	  "attached pool's) queued before the call has finished (needs admin=True); at once\n"
	  "for a pool without a tier." },
	{ "pool_purge_remote", (PyCFunction)client_pool_purge_remote, METH_VARARGS,
	  "pool_purge_remote(name=None)\n--\n\nDelete pool NAME's keys (None: the attached\n"
	  "pool's) from its cluster tier, every master's (needs admin=True): how many.\n"
	  "EOPNOTSUPP: no cluster tier; EHOSTUNREACH: a master not reached (its keys stay)." },
	{ "evict", (PyCFunction)client_evict, METH_O,
	  "evict(ids)\n--\n\nThe attached pool's blocks ids forget their cache hash (needs\n"
	  "admin=True); how many had one." },
	{ "free_queue", (PyCFunction)client_free_queue, METH_NOARGS,
	  "free_queue()\n--\n\nThe attached pool's free queue, head (next handed out) first\n"
	  "(needs admin=True)." },
	{ "open", (PyCFunction)(void (*)(void))client_open, METH_VARARGS | METH_KEYWORDS,
	  "open(tokens, salt=None, prefix=None)\n--\n\n"
	  "Open a sequence with its prompt; a Sequence (a context manager that closes it).\n"
	  "prefix: the R-SWA prompt prefix, tokens (default: the prompt's length)." },
	{ "attend", (PyCFunction)(void (*)(void))kvpy_attend, METH_VARARGS | METH_KEYWORDS,
	  "attend(group, layer, items, scale, softcap=0.0)\n--\n\n"
	  "One ATTEND over many sequences: items [(sequence, q, first)], q float32\n"
	  "[n][q_heads][head_dim]; the outputs, float32, in the same order." },
	{ "batch", (PyCFunction)client_batch, METH_NOARGS,
	  "batch()\n--\n\nA Batch: `with client.batch() as b:` collects operations and runs\n"
	  "them in as few ring submissions as the ring allows on exit." },
	{ "map", (PyCFunction)client_map, METH_NOARGS,
	  "map()\n--\n\nMap the attached pool's memory (a pool restricted to this client's\n"
	  "namespace): a PoolMap." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef client_getset[] = {
	{ "pool", (getter)client_get_pool, NULL, "The attached pool (PoolInfo), or None.", NULL },
	{ "closed", (getter)client_get_closed, NULL, "True once closed.", NULL },
	{ "features", (getter)client_get_features, NULL, "The KVP_FEAT_* bits agreed.", NULL },
	{ "boot_id", (getter)client_get_boot_id, NULL,
	  "The daemon's run (random at its start; 0 from an older daemon): block ids mean\n"
	  "the same to two clients with the same one.", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot client_slots[] = {
	{ Py_tp_new, client_new },
	{ Py_tp_dealloc, client_dealloc },
	{ Py_tp_methods, client_methods },
	{ Py_tp_getset, client_getset },
	{ Py_tp_doc, "Client(socket=None, pool=None, namespace='', admin=False, timeout_ms=0, *,\n"
		     "       spin_us=0, arena_bytes=16 MiB)\n--\n\n"
		     "A connection to kvpoold (a context manager that closes it). socket: default\n"
		     "$KVPOOL_SOCKET, else /run/kvpool/kvpool.sock. timeout_ms: how long any call\n"
		     "waits for the daemon (0: 30 s). spin_us: spin that long for a completion\n"
		     "before sleeping." },
	{ 0, NULL },
};

PyType_Spec kvpy_client_spec = {
	.name = "kvpool.Client",
	.basicsize = sizeof(ClientObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
	.slots = client_slots,
};
