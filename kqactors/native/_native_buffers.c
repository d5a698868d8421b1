/* kqactors/native/_native_buffers.c: the producer's app-side buffers (Packer, Buffers) and delivery reports.
 *
 * Part of kqactors.native._native (overview, cycle-collector rule and thread safety: _native.c). Packer is the
 * twin of producer_core.packing.PyMessagePacker, Buffers the C base of producer_buffers'
 * NativeProducerBuffers, complete_ok() the twin of producer_buffers._complete_ok_py, DeliveryCounter the twin
 * of producer_buffers.PyDeliveryCounter and serve_reports() the twin of Producer._serve_ready's loop.
 *
 * Frame layout (little-endian, see records/packed.py):
 *   int64 timestamp_ms | int32 key_len (-1 = null) | int32 value_len (-1 = null) | uint16 header_count
 *   key | value | header_count x (uint16 name_len | int32 value_len (-1 = null) | name utf-8 | value)
 */

#include "_native.h"

#include <time.h>

#define ENTRY_SIZE 18          /* struct "<qiiH" */
#define HEADER_SIZE 6          /* struct "<Hi" */
#define SEGMENT_BYTES (64 * 1024)
#define KEEP_CAPACITY (256 * 1024)  /* take() keeps a buffer up to this size for the next frame */

/* Pending entry layout, as producer_buffers: (key, value, headers, timestamp, callback, enq_time, size). */
enum { P_KEY, P_VALUE, P_HEADERS, P_TS, P_CB, P_ENQ, P_SIZE, P_LEN };

/* len() of the ready queue (a ReadyQueue, read directly, or any sequence); -1 on error. */
static Py_ssize_t ready_length(PyObject *ready);

static PyObject *StructError;   /* struct.error: what the Python twin raises for out-of-range fields */
static PyObject *monotonic;     /* time.monotonic: the enqueue clock (the toppar hosts read the same one) */
/* Interned attribute and method names, made once at import. */
static PyObject *str_acquire, *str_release, *str_next_msgid, *str_packer, *str_pending, *str_new_buffer;

/* ---- little-endian stores (memcpy keeps them alignment-safe; gcc turns them into plain moves) ---- */

static inline void put_u16(char *p, uint16_t v) {
    unsigned char b[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    memcpy(p, b, 2);
}

static inline void put_i32(char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                          (unsigned char)(u >> 24)};
    memcpy(p, b, 4);
}

static inline void put_i64(char *p, int64_t v) {
    uint64_t u = (uint64_t)v;
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(u >> (8 * i));
    memcpy(p, b, 8);
}

/* ======================================================================================================
 * Packer
 * ==================================================================================================== */

typedef struct {
    PyObject_HEAD
    char *buf;              /* frame bytes so far (PyMem), NULL until the first append */
    Py_ssize_t len;         /* == nbytes of the Python twin: the frame's exact length */
    Py_ssize_t cap;
    Py_ssize_t count;
    long long first_msgid;
    double first_enq;
    Py_ssize_t headers;     /* headers in the frame so far */
    PyObject *cuts;         /* list of [count, nbytes, headers], one per SEGMENT_BYTES; owned */
    Py_ssize_t cut_at;
} Packer;

/* One message's fields, checked and measured before anything is written, so a failing append leaves
 * the packer (and the pending table) untouched. Borrowed references only. */
typedef struct {
    long long timestamp;
    PyObject *key, *value;  /* bytes or NULL for None */
    PyObject *hseq;         /* PySequence_Fast of the headers (new reference) or NULL */
    Py_ssize_t nheaders;
    Py_ssize_t size;        /* bytes this message adds to the frame */
} Parsed;

static int parse_bytes_or_none(PyObject *obj, PyObject **out, const char *what) {
    if (obj == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes or None, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (PyBytes_GET_SIZE(obj) > INT32_MAX) {
        PyErr_Format(StructError, "%s is too long for the packed layout", what);
        return -1;
    }
    *out = obj;
    return 0;
}

/* Fills *m; on success the caller owns m->hseq (Py_XDECREF it). */
static int parse_message(Parsed *m, PyObject *timestamp, PyObject *key, PyObject *value, PyObject *headers) {
    int overflow = 0;
    m->hseq = NULL;
    m->timestamp = PyLong_AsLongLongAndOverflow(timestamp, &overflow);
    if (overflow) {
        PyErr_SetString(StructError, "timestamp out of range for int64");
        return -1;
    }
    if (m->timestamp == -1 && PyErr_Occurred()) return -1;
    if (parse_bytes_or_none(key, &m->key, "key") < 0) return -1;
    if (parse_bytes_or_none(value, &m->value, "value") < 0) return -1;
    m->size = ENTRY_SIZE + (m->key ? PyBytes_GET_SIZE(m->key) : 0) + (m->value ? PyBytes_GET_SIZE(m->value) : 0);
    m->nheaders = 0;
    if (headers == Py_None) return 0;
    m->hseq = PySequence_Fast(headers, "headers must be a sequence of (name, value) pairs");
    if (m->hseq == NULL) return -1;
    m->nheaders = PySequence_Fast_GET_SIZE(m->hseq);
    if (m->nheaders > 0xFFFF) {
        PyErr_SetString(StructError, "too many headers for the packed layout (at most 65535)");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < m->nheaders; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(m->hseq, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "headers must be (name, value) tuples");
            goto fail;
        }
        PyObject *name = PyTuple_GET_ITEM(item, 0), *hval = PyTuple_GET_ITEM(item, 1), *hbytes;
        if (!PyUnicode_Check(name)) {
            PyErr_Format(PyExc_TypeError, "header name must be str, not %.100s", Py_TYPE(name)->tp_name);
            goto fail;
        }
        Py_ssize_t nlen;
        /* UTF-8 is cached inside the str object, so the write pass below gets it again for free. */
        if (PyUnicode_AsUTF8AndSize(name, &nlen) == NULL) goto fail;
        if (nlen > 0xFFFF) {
            PyErr_SetString(StructError, "header name too long for the packed layout");
            goto fail;
        }
        if (parse_bytes_or_none(hval, &hbytes, "header value") < 0) goto fail;
        m->size += HEADER_SIZE + nlen + (hbytes ? PyBytes_GET_SIZE(hbytes) : 0);
    }
    return 0;
fail:
    Py_CLEAR(m->hseq);
    return -1;
}

static int packer_reserve(Packer *self, Py_ssize_t extra) {
    if (self->len + extra <= self->cap) return 0;
    Py_ssize_t cap = self->cap ? self->cap : 4096;
    while (cap < self->len + extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *buf = PyMem_Realloc(self->buf, (size_t)cap);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->buf = buf;
    self->cap = cap;
    return 0;
}

/* Writes a parsed message; cannot fail (room was reserved, every field was checked). */
static void packer_write(Packer *self, const Parsed *m) {
    char *p = self->buf + self->len;
    Py_ssize_t klen = m->key ? PyBytes_GET_SIZE(m->key) : -1;
    Py_ssize_t vlen = m->value ? PyBytes_GET_SIZE(m->value) : -1;
    put_i64(p, m->timestamp);
    put_i32(p + 8, (int32_t)klen);
    put_i32(p + 12, (int32_t)vlen);
    put_u16(p + 16, (uint16_t)m->nheaders);
    p += ENTRY_SIZE;
    if (klen > 0) {
        memcpy(p, PyBytes_AS_STRING(m->key), (size_t)klen);
        p += klen;
    }
    if (vlen > 0) {
        memcpy(p, PyBytes_AS_STRING(m->value), (size_t)vlen);
        p += vlen;
    }
    for (Py_ssize_t i = 0; i < m->nheaders; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(m->hseq, i);
        PyObject *hval = PyTuple_GET_ITEM(item, 1);
        Py_ssize_t nlen;
        const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(item, 0), &nlen);  /* cached: no error */
        Py_ssize_t hlen = hval == Py_None ? -1 : PyBytes_GET_SIZE(hval);
        put_u16(p, (uint16_t)nlen);
        put_i32(p + 2, (int32_t)hlen);
        p += HEADER_SIZE;
        memcpy(p, name, (size_t)nlen);
        p += nlen;
        if (hlen > 0) {
            memcpy(p, PyBytes_AS_STRING(hval), (size_t)hlen);
            p += hlen;
        }
    }
    self->len += m->size;
    self->headers += m->nheaders;
}

/* The segment cut that the append about to be written would cause, built beforehand so that nothing
 * can fail after the write: a new list [count, nbytes, headers], or NULL with no error when no cut. */
static PyObject *packer_next_cut(Packer *self, const Parsed *m, int *failed) {
    *failed = 0;
    if (self->len + m->size < self->cut_at) return NULL;
    PyObject *cut = Py_BuildValue("[nnn]", self->count + 1, self->len + m->size, self->headers + m->nheaders);
    if (cut == NULL) *failed = 1;
    return cut;
}

/* Commits a write: counters and the prepared cut (stolen). */
static void packer_commit(Packer *self, long long msgid, double enq, PyObject *cut) {
    if (self->count == 0) {
        self->first_msgid = msgid;
        self->first_enq = enq;
    }
    self->count++;
    if (cut != NULL) {
        /* packer_prepare_cut_slot() appended a None placeholder for it, so this cannot fail. */
        Py_ssize_t last = PyList_GET_SIZE(self->cuts) - 1;
        PyObject *placeholder = PyList_GET_ITEM(self->cuts, last);
        PyList_SET_ITEM(self->cuts, last, cut);
        Py_DECREF(placeholder);
        self->cut_at = self->len + SEGMENT_BYTES;
    }
}

/* Appends a None placeholder to cuts for the prepared cut, so committing it later cannot fail. */
static int packer_prepare_cut_slot(Packer *self) {
    return PyList_Append(self->cuts, Py_None);
}

static void packer_drop_cut_slot(Packer *self) {
    Py_ssize_t n = PyList_GET_SIZE(self->cuts);
    /* Cannot fail: shrinking a list by one. */
    PyList_SetSlice(self->cuts, n - 1, n, NULL);
}

static int packer_init(Packer *self, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Packer() takes no arguments");
        return -1;
    }
    PyObject *cuts = PyList_New(0);
    if (cuts == NULL) return -1;
    Py_XSETREF(self->cuts, cuts);
    PyMem_Free(self->buf);
    self->buf = NULL;
    self->len = self->cap = self->count = self->headers = 0;
    self->first_msgid = 0;
    self->first_enq = 0.0;
    self->cut_at = SEGMENT_BYTES;
    return 0;
}

static void packer_dealloc(Packer *self) {
    PyMem_Free(self->buf);
    Py_XDECREF(self->cuts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Shared body of append() and append_pending(): pending == NULL for plain append. */
static PyObject *packer_append_impl(Packer *self, PyObject *msgid_obj, PyObject *timestamp, PyObject *key,
                                    PyObject *value, PyObject *headers, PyObject *enq_obj, PyObject *pending,
                                    PyObject *callback, PyObject *size) {
    Parsed m;
    PyObject *cut = NULL, *entry = NULL;
    int cut_failed;
    long long msgid = PyLong_AsLongLong(msgid_obj);
    if (msgid == -1 && PyErr_Occurred()) return NULL;
    double enq = PyFloat_AsDouble(enq_obj);
    if (enq == -1.0 && PyErr_Occurred()) return NULL;
    if (self->cuts == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Packer.__init__ was not called");
        return NULL;
    }
    if (parse_message(&m, timestamp, key, value, headers) < 0) return NULL;
    if (packer_reserve(self, m.size) < 0) goto fail;
    cut = packer_next_cut(self, &m, &cut_failed);
    if (cut_failed) goto fail;
    if (cut != NULL && packer_prepare_cut_slot(self) < 0) goto fail;
    if (pending != NULL) {
        /* The pending entry goes in before the bytes are written: if the dict insert fails, nothing
         * was packed, and a packed message always has its entry (exactly one delivery report each). */
        entry = PyTuple_Pack(P_LEN, key, value, headers, timestamp, callback, enq_obj, size);
        if (entry == NULL || PyDict_SetItem(pending, msgid_obj, entry) < 0) {
            if (cut != NULL) packer_drop_cut_slot(self);
            goto fail;
        }
        PyObject_GC_UnTrack(entry);  /* see "Cycle collector" at the top */
        Py_DECREF(entry);  /* the dict holds it now */
    }
    packer_write(self, &m);
    packer_commit(self, msgid, enq, cut);  /* steals cut */
    Py_XDECREF(m.hseq);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(entry);
    Py_XDECREF(cut);
    Py_XDECREF(m.hseq);
    return NULL;
}

static PyObject *packer_append(Packer *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"msgid", "timestamp_ms", "key", "value", "headers", "enq_time", NULL};
    PyObject *msgid, *timestamp, *key, *value, *headers, *enq;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOO:append", kwlist, &msgid, &timestamp, &key, &value,
                                     &headers, &enq))
        return NULL;
    return packer_append_impl(self, msgid, timestamp, key, value, headers, enq, NULL, NULL, NULL);
}

/* append_pending(msgid, timestamp_ms, key, value, headers, enq_time, pending, callback, size):
 * the hot path of ProducerBuffers.append — positional only (vectorcall, no argument parsing cost). */
static PyObject *packer_append_pending(Packer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "append_pending() takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyDict_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "append_pending(): pending must be a dict");
        return NULL;
    }
    return packer_append_impl(self, args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7],
                              args[8]);
}

static PyObject *packer_take(Packer *self, PyObject *Py_UNUSED(ignored)) {
    if (self->cuts == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Packer.__init__ was not called");
        return NULL;
    }
    PyObject *frame = PyBytes_FromStringAndSize(self->buf ? self->buf : "", self->len);
    if (frame == NULL) return NULL;
    PyObject *cuts = PyList_New(0);
    if (cuts == NULL) {
        Py_DECREF(frame);
        return NULL;
    }
    /* "N" steals frame: on failure Py_BuildValue releases it. */
    PyObject *result = Py_BuildValue("(LndN)", self->first_msgid, self->count, self->first_enq, frame);
    if (result == NULL) {
        Py_DECREF(cuts);
        return NULL;
    }
    Py_SETREF(self->cuts, cuts);  /* a caller that read .cuts before take() keeps the old list */
    if (self->cap > KEEP_CAPACITY) {  /* do not pin a large buffer on an idle partition */
        PyMem_Free(self->buf);
        self->buf = NULL;
        self->cap = 0;
    }
    /* first_enq is left as it is, as the Python twin does (an empty take() returns the last one). */
    self->len = self->count = self->headers = 0;
    self->first_msgid = 0;
    self->cut_at = SEGMENT_BYTES;
    return result;
}

static PyObject *packer_byte_size(Packer *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromSsize_t(self->len);
}

static Py_ssize_t packer_length(Packer *self) {
    return self->count;
}

static PyObject *packer_get_cuts(Packer *self, void *Py_UNUSED(closure)) {
    if (self->cuts == NULL) return PyList_New(0);
    Py_INCREF(self->cuts);
    return self->cuts;
}

static PyMethodDef packer_methods[] = {
    {"append", (PyCFunction)(void (*)(void))packer_append, METH_VARARGS | METH_KEYWORDS,
     "append(msgid, timestamp_ms, key, value, headers, enq_time): append one message."},
    {"append_pending", (PyCFunction)(void (*)(void))packer_append_pending, METH_FASTCALL,
     "append_pending(msgid, timestamp_ms, key, value, headers, enq_time, pending, callback, size): append "
     "one message and set pending[msgid] = (key, value, headers, timestamp_ms, callback, enq_time, size)."},
    {"take", (PyCFunction)packer_take, METH_NOARGS,
     "take() -> (first_msgid, count, first_enq_time, frame); resets the packer."},
    {"byte_size", (PyCFunction)packer_byte_size, METH_NOARGS, "Frame bytes so far."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef packer_members[] = {
    {"count", T_PYSSIZET, offsetof(Packer, count), READONLY, "messages in the frame"},
    {"first_msgid", T_LONGLONG, offsetof(Packer, first_msgid), READONLY, "msgid of the first message"},
    {"nbytes", T_PYSSIZET, offsetof(Packer, len), READONLY, "frame bytes so far"},
    {"first_enq", T_DOUBLE, offsetof(Packer, first_enq), READONLY, "enqueue time of the first message"},
    {"headers", T_PYSSIZET, offsetof(Packer, headers), READONLY, "headers in the frame so far"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef packer_getset[] = {
    {"cuts", (getter)packer_get_cuts, NULL, "segment boundaries [count, frame bytes, headers]", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods packer_as_sequence = {
    .sq_length = (lenfunc)packer_length,
};

static PyTypeObject PackerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kqactors.native._native.Packer",
    .tp_basicsize = sizeof(Packer),
    .tp_dealloc = (destructor)packer_dealloc,
    .tp_as_sequence = &packer_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "C twin of kqactors.core.producer.packing.PyMessagePacker (not thread-safe by itself).",
    .tp_methods = packer_methods,
    .tp_members = packer_members,
    .tp_getset = packer_getset,
    .tp_init = (initproc)packer_init,
    .tp_new = PyType_GenericNew,
};

/* ======================================================================================================
 * Lock: ProducerBuffers.lock, a threading.Lock the C append takes without two Python method calls
 * ==================================================================================================== */

/* produce() takes the buffers' lock once per message; through threading.Lock's acquire()/release() that was two
 * method calls with argument parsing, ~10 % of a C produce(). This is the same kind of lock (not reentrant, held
 * briefly) with threading.Lock's Python surface (acquire(blocking, timeout), release(), locked(), with), which C
 * takes directly: without releasing the GIL when it is free, else waiting with the GIL released. */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    char locked;
} FastLock;

static PyTypeObject FastLockType;

static void fastlock_take(FastLock *self) {
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    self->locked = 1;
}

static void fastlock_give(FastLock *self) {
    self->locked = 0;
    PyThread_release_lock(self->lock);
}

static PyObject *fastlock_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Lock() takes no arguments");
        return NULL;
    }
    FastLock *self = (FastLock *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_MemoryError, "cannot allocate lock");
        return NULL;
    }
    return (PyObject *)self;
}

static void fastlock_dealloc(FastLock *self) {
    if (self->lock != NULL) {
        if (self->locked) PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* acquire(blocking=True, timeout=-1) -> bool, as threading.Lock's. */
static PyObject *fastlock_acquire(FastLock *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pd:acquire", kwlist, &blocking, &timeout)) return NULL;
    if (!blocking && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return NULL;
    }
    if (timeout < 0 && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    if (PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        self->locked = 1;
        Py_RETURN_TRUE;
    }
    if (!blocking) Py_RETURN_FALSE;
    if (timeout == -1) {
        fastlock_take(self);
        Py_RETURN_TRUE;
    }
    if (timeout * 1e6 >= (double)PY_TIMEOUT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "timeout value is too large");
        return NULL;
    }
    PyLockStatus status;
    Py_BEGIN_ALLOW_THREADS
    status = PyThread_acquire_lock_timed(self->lock, (PY_TIMEOUT_T)(timeout * 1e6), 0);
    Py_END_ALLOW_THREADS
    if (status != PY_LOCK_ACQUIRED) Py_RETURN_FALSE;
    self->locked = 1;
    Py_RETURN_TRUE;
}

static PyObject *fastlock_release(FastLock *self, PyObject *Py_UNUSED(ignored)) {
    if (!self->locked) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    fastlock_give(self);
    Py_RETURN_NONE;
}

static PyObject *fastlock_exit(FastLock *self, PyObject *Py_UNUSED(args)) {
    return fastlock_release(self, NULL);
}

static PyObject *fastlock_locked(FastLock *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(self->locked);
}

static PyMethodDef fastlock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))fastlock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool"},
    {"release", (PyCFunction)fastlock_release, METH_NOARGS, "release()"},
    {"locked", (PyCFunction)fastlock_locked, METH_NOARGS, "locked() -> bool"},
    {"__enter__", (PyCFunction)(void (*)(void))fastlock_acquire, METH_VARARGS | METH_KEYWORDS, "acquire()"},
    {"__exit__", (PyCFunction)fastlock_exit, METH_VARARGS, "release()"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kqactors.native._native.Lock",
    .tp_basicsize = sizeof(FastLock),
    .tp_dealloc = (destructor)fastlock_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Lock(): threading.Lock's surface, taken by the C append without Python calls "
              "(ProducerBuffers.lock with the extension).",
    .tp_methods = fastlock_methods,
    .tp_new = fastlock_new,
};

/* ======================================================================================================
 * Buffers: the C base of producer_buffers' native ProducerBuffers
 * ==================================================================================================== */

static void buffers_forget_last(Buffers *self) {
    Py_CLEAR(self->last_topic);
    Py_CLEAR(self->last_partition);
    Py_CLEAR(self->last_partitions);
    Py_CLEAR(self->last_buf);
    Py_CLEAR(self->last_packer);
    Py_CLEAR(self->last_pending);
}

static int buffers_traverse(Buffers *self, visitproc visit, void *arg) {
    Py_VISIT(self->lock);
    Py_VISIT(self->partitions);
    Py_VISIT(self->ready);
    Py_VISIT(self->last_topic);
    Py_VISIT(self->last_partition);
    Py_VISIT(self->last_partitions);
    Py_VISIT(self->last_buf);
    Py_VISIT(self->last_packer);
    Py_VISIT(self->last_pending);
    return 0;
}

static int buffers_clear(Buffers *self) {
    Py_CLEAR(self->lock);
    Py_CLEAR(self->partitions);
    Py_CLEAR(self->ready);
    buffers_forget_last(self);
    return 0;
}

static void buffers_dealloc(Buffers *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    buffers_clear(self);
    type->tp_free((PyObject *)self);
}

/* The locked part of append(); returns 1 appended, 0 no room, -1 error. Caller holds the lock (buffers_lock).
 * args: topic, partition, key, value, headers, timestamp, callback, size; now: the enqueue time (a float). */
int buffers_append_locked(Buffers *self, PyObject *const *args, int reserved, PyObject *now) {
    PyObject *topic = args[0], *partition = args[1], *key = args[2], *value = args[3], *headers = args[4];
    PyObject *timestamp = args[5], *callback = args[6], *size_obj = args[7];
    if (self->partitions == NULL || self->ready == NULL || !PyDict_Check(self->partitions)) {
        PyErr_SetString(PyExc_RuntimeError, "ProducerBuffers is not initialised");
        return -1;
    }
    Py_ssize_t size = PyLong_AsSsize_t(size_obj);
    if (size == -1 && PyErr_Occurred()) return -1;
    if (!reserved) {
        Py_ssize_t nready = ready_length(self->ready);
        if (nready < 0) return -1;
        if ((self->max_messages && self->count + nready >= self->max_messages) ||
            (self->nbytes + size > self->max_bytes && self->count > 0))
            return 0;
    }
    int rc = -1;
    PyObject *buf, *msgid = NULL, *next = NULL, *packer = NULL, *pending = NULL, *res = NULL;
    if (topic == self->last_topic && partition == self->last_partition && self->partitions == self->last_partitions) {
        buf = self->last_buf;  /* the same partition as the last append (see Buffers.last_*) */
        packer = self->last_packer;
        pending = self->last_pending;
        Py_INCREF(buf);
        Py_INCREF(packer);
        Py_INCREF(pending);
    } else {
        PyObject *tp = PyTuple_Pack(2, topic, partition);
        if (tp == NULL) return -1;
        buf = PyDict_GetItemWithError(self->partitions, tp);  /* borrowed */
        Py_DECREF(tp);
        if (buf != NULL) {
            Py_INCREF(buf);
        } else {
            if (PyErr_Occurred()) return -1;
            /* First message to this partition: the Python side creates and registers its PartitionBuffer. */
            PyObject *call_args[3] = {(PyObject *)self, topic, partition};
            buf = PyObject_VectorcallMethod(str_new_buffer, call_args, 3, NULL);
            if (buf == NULL) return -1;
        }
        if ((packer = PyObject_GetAttr(buf, str_packer)) == NULL) goto done;
        if ((pending = PyObject_GetAttr(buf, str_pending)) == NULL) goto done;
        if (!PyObject_TypeCheck(packer, &PackerType) || !PyDict_Check(pending)) {
            PyErr_SetString(PyExc_TypeError, "native ProducerBuffers needs a native Packer and a dict of pending");
            goto done;
        }
        buffers_forget_last(self);
        Py_INCREF(topic);
        Py_INCREF(partition);
        Py_INCREF(self->partitions);
        Py_INCREF(buf);
        Py_INCREF(packer);
        Py_INCREF(pending);
        self->last_topic = topic;
        self->last_partition = partition;
        self->last_partitions = self->partitions;
        self->last_buf = buf;
        self->last_packer = packer;
        self->last_pending = pending;
    }
    if ((msgid = PyObject_GetAttr(buf, str_next_msgid)) == NULL) goto done;
    long long id = PyLong_AsLongLong(msgid);
    if (id == -1 && PyErr_Occurred()) goto done;
    if ((next = PyLong_FromLongLong(id + 1)) == NULL) goto done;
    res = packer_append_impl((Packer *)packer, msgid, timestamp, key, value, headers, now, pending, callback,
                             size_obj);
    if (res == NULL) goto done;
    /* Only a packed message uses up its msgid (the Python twin moves on before packing; a failed pack
     * there leaves a gap). */
    if (PyObject_SetAttr(buf, str_next_msgid, next) < 0) {
        /* Cannot happen with PartitionBuffer's slot; the message is packed and pending, so report it. */
        goto done;
    }
    if (!reserved) {
        self->count++;
        self->nbytes += size;
    }
    self->unsent++;
    rc = 1;
done:
    Py_XDECREF(res);
    Py_XDECREF(next);
    Py_XDECREF(pending);
    Py_XDECREF(packer);
    Py_XDECREF(msgid);
    Py_DECREF(buf);
    return rc;
}

/* The run of null-key messages values[start:stop] of one partition, appended while each is bytes or None, fits
 * max_payload (its value plus hsize, the headers' size) and the queue limits; the same headers, timestamp,
 * callback and enqueue time for all. The partition's buffer, msgid, packer and pending table are looked up
 * once for the run instead of once per message (append's per-message work). *appended says how many went in
 * (also on error). Returns 0, or -1 with an error set. Caller holds the lock. */
int buffers_append_run_locked(Buffers *self, PyObject *topic, PyObject *partition, PyObject *values,
                              Py_ssize_t start, Py_ssize_t stop, PyObject *headers, Py_ssize_t hsize,
                              Py_ssize_t max_payload, PyObject *timestamp, PyObject *callback, PyObject *now,
                              Py_ssize_t *appended) {
    *appended = 0;
    if (self->partitions == NULL || self->ready == NULL || !PyDict_Check(self->partitions) || !PyList_Check(values)) {
        PyErr_SetString(PyExc_RuntimeError, "ProducerBuffers is not initialised");
        return -1;
    }
    PyObject *tp = PyTuple_Pack(2, topic, partition);
    if (tp == NULL) return -1;
    PyObject *buf = PyDict_GetItemWithError(self->partitions, tp);  /* borrowed */
    Py_DECREF(tp);
    if (buf != NULL) {
        Py_INCREF(buf);
    } else {
        if (PyErr_Occurred()) return -1;
        PyObject *call_args[3] = {(PyObject *)self, topic, partition};
        buf = PyObject_VectorcallMethod(str_new_buffer, call_args, 3, NULL);
        if (buf == NULL) return -1;
    }
    int rc = -1;
    long long first = 0, id = 0;
    PyObject *msgid = NULL, *packer = NULL, *pending = NULL;
    if ((msgid = PyObject_GetAttr(buf, str_next_msgid)) == NULL) goto done;
    if ((packer = PyObject_GetAttr(buf, str_packer)) == NULL) goto done;
    if ((pending = PyObject_GetAttr(buf, str_pending)) == NULL) goto done;
    if (!PyObject_TypeCheck(packer, &PackerType) || !PyDict_Check(pending)) {
        PyErr_SetString(PyExc_TypeError, "native ProducerBuffers needs a native Packer and a dict of pending");
        goto done;
    }
    first = id = PyLong_AsLongLong(msgid);
    if (id == -1 && PyErr_Occurred()) goto done;
    Py_CLEAR(msgid);
    for (Py_ssize_t i = start; i < stop && i < PyList_GET_SIZE(values); i++) {
        PyObject *value = PyList_GET_ITEM(values, i);
        if (value != Py_None && !PyBytes_CheckExact(value)) break;
        Py_ssize_t size = hsize + (value != Py_None ? PyBytes_GET_SIZE(value) : 0);
        if (size > max_payload) break;
        Py_ssize_t nready = ready_length(self->ready);
        if (nready < 0) goto done;
        if ((self->max_messages && self->count + nready >= self->max_messages) ||
            (self->nbytes + size > self->max_bytes && self->count > 0))
            break;  /* the queue is full */
        PyObject *size_obj = PyLong_FromSsize_t(size);
        if (size_obj == NULL || (msgid = PyLong_FromLongLong(id)) == NULL) {
            Py_XDECREF(size_obj);
            goto done;
        }
        Py_INCREF(value);  /* the list is the caller's */
        PyObject *res = packer_append_impl((Packer *)packer, msgid, timestamp, Py_None, value, headers, now, pending,
                                           callback, size_obj);
        Py_DECREF(value);
        Py_DECREF(size_obj);
        Py_CLEAR(msgid);
        if (res == NULL) goto done;
        Py_DECREF(res);
        id++;
        self->count++;
        self->nbytes += size;
        self->unsent++;
    }
    rc = 0;
done:
    if (id != first) {
        /* Only packed messages use up msgids (as append()); set even after an error, for those packed. */
        PyObject *exc_type, *exc_value, *exc_tb;
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
        PyObject *next = PyLong_FromLongLong(id);
        if (next == NULL || PyObject_SetAttr(buf, str_next_msgid, next) < 0) {
            rc = -1;  /* cannot happen with PartitionBuffer's slot */
            Py_XDECREF(exc_type);
            Py_XDECREF(exc_value);
            Py_XDECREF(exc_tb);
        } else {
            PyErr_Restore(exc_type, exc_value, exc_tb);
        }
        Py_XDECREF(next);
    }
    *appended = (Py_ssize_t)(id - first);
    Py_XDECREF(msgid);
    Py_XDECREF(pending);
    Py_XDECREF(packer);
    Py_DECREF(buf);
    return rc;
}

/* Takes / gives back ProducerBuffers.lock (a threading.Lock; acquiring may release the GIL). 0 or -1. */
int buffers_lock(Buffers *self) {
    if (self->lock == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ProducerBuffers is not initialised");
        return -1;
    }
    if (Py_IS_TYPE(self->lock, &FastLockType)) {
        fastlock_take((FastLock *)self->lock);
        return 0;
    }
    PyObject *res = PyObject_CallMethodNoArgs(self->lock, str_acquire);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}

/* Gives the lock back keeping any exception already set; -1 only if the release itself failed. */
int buffers_unlock(Buffers *self) {
    if (self->lock != NULL && Py_IS_TYPE(self->lock, &FastLockType) && ((FastLock *)self->lock)->locked) {
        fastlock_give((FastLock *)self->lock);  /* no Python call: any exception set stays as it is */
        return 0;
    }
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject *res = self->lock ? PyObject_CallMethodNoArgs(self->lock, str_release) : NULL;
    if (res == NULL) {
        if (self->lock == NULL) PyErr_SetString(PyExc_RuntimeError, "ProducerBuffers lost its lock");
        Py_XDECREF(exc_type);
        Py_XDECREF(exc_value);
        Py_XDECREF(exc_tb);
        return -1;
    }
    Py_DECREF(res);
    PyErr_Restore(exc_type, exc_value, exc_tb);
    return 0;
}

/* The enqueue clock (time.monotonic()) as a new float, or NULL: CLOCK_MONOTONIC read here, as time.monotonic()
 * reads it on Linux (the value it would return, without the call), else time.monotonic() itself. */
PyObject *buffers_now(void) {
#if defined(__linux__) && defined(CLOCK_MONOTONIC)
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0) {
        long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
        return PyFloat_FromDouble((double)ns / 1e9);
    }
#endif
    return PyObject_CallNoArgs(monotonic);
}

/* append(topic, partition, key, value, headers, timestamp, callback, size, reserved=False) -> bool
 * Twin of ProducerBuffers.append (read that for the semantics). */
PyObject *buffers_append(Buffers *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *reserved_obj = nargs == 9 ? args[8] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs + nkw > 9 || nargs < 8 || (nkw == 1 && PyUnicode_CompareWithASCIIString(
                                                       PyTuple_GET_ITEM(kwnames, 0), "reserved") != 0)) {
        PyErr_SetString(PyExc_TypeError, "append(topic, partition, key, value, headers, timestamp, callback, "
                                         "size, reserved=False)");
        return NULL;
    }
    if (nkw == 1) reserved_obj = args[nargs];
    int reserved = 0;
    if (reserved_obj != NULL && (reserved = PyObject_IsTrue(reserved_obj)) < 0) return NULL;
    if (self->lock == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ProducerBuffers is not initialised");
        return NULL;
    }
    PyObject *now = buffers_now();
    if (now == NULL) return NULL;
    PyObject *lock = self->lock;
    Py_INCREF(lock);  /* the attribute could be replaced while we hold it */
    if (Py_IS_TYPE(lock, &FastLockType)) {
        fastlock_take((FastLock *)lock);
        int rc = buffers_append_locked(self, args, reserved, now);
        fastlock_give((FastLock *)lock);
        Py_DECREF(lock);
        Py_DECREF(now);
        if (rc < 0) return NULL;
        return PyBool_FromLong(rc);
    }
    PyObject *res = PyObject_CallMethodNoArgs(lock, str_acquire);  /* may block, releasing the GIL */
    if (res == NULL) {
        Py_DECREF(lock);
        Py_DECREF(now);
        return NULL;
    }
    Py_DECREF(res);
    int rc = buffers_append_locked(self, args, reserved, now);
    /* Release the lock on every path; an exception from append stays the one raised. */
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    res = PyObject_CallMethodNoArgs(lock, str_release);
    Py_DECREF(lock);
    Py_DECREF(now);
    if (res == NULL) {
        Py_XDECREF(exc_type);
        Py_XDECREF(exc_value);
        Py_XDECREF(exc_tb);
        return NULL;
    }
    Py_DECREF(res);
    PyErr_Restore(exc_type, exc_value, exc_tb);
    if (rc < 0) return NULL;
    return PyBool_FromLong(rc);
}

static PyMethodDef buffers_methods[] = {
    {"append", (PyCFunction)(void (*)(void))buffers_append, METH_FASTCALL | METH_KEYWORDS,
     "append(topic, partition, key, value, headers, timestamp, callback, size, reserved=False) -> bool"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef buffers_members[] = {
    {"lock", T_OBJECT_EX, offsetof(Buffers, lock), 0, "lock guarding append/take/complete"},
    {"partitions", T_OBJECT_EX, offsetof(Buffers, partitions), 0, "(topic, partition) -> PartitionBuffer"},
    {"ready", T_OBJECT_EX, offsetof(Buffers, ready), 0, "delivery reports waiting for poll()"},
    {"max_messages", T_PYSSIZET, offsetof(Buffers, max_messages), 0, "queue.buffering.max.messages (0: none)"},
    {"max_bytes", T_PYSSIZET, offsetof(Buffers, max_bytes), 0, "queue.buffering.max.kbytes in bytes"},
    {"count", T_PYSSIZET, offsetof(Buffers, count), 0, "messages produced and not yet reported"},
    {"nbytes", T_PYSSIZET, offsetof(Buffers, nbytes), 0, "their bytes"},
    {"unsent", T_PYSSIZET, offsetof(Buffers, unsent), 0, "messages in packers, not yet handed over"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject BuffersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kqactors.native._native.Buffers",
    .tp_basicsize = sizeof(Buffers),
    .tp_dealloc = (destructor)buffers_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "C base of producer_buffers.NativeProducerBuffers: counters as members, append() in C.",
    .tp_traverse = (traverseproc)buffers_traverse,
    .tp_clear = (inquiry)buffers_clear,
    .tp_methods = buffers_methods,
    .tp_members = buffers_members,
    .tp_new = PyType_GenericNew,
};

/* ======================================================================================================
 * DeliveryCounter: one callback per run of successful reports (twin of producer_buffers.DeliveryCounter)
 * ==================================================================================================== */

/* A delivery callback for callers that only count successes (the ingest daemon's chunks): complete_ok()
 * queues its one prebuilt report tuple (counter, None, None) for each delivered message instead of building
 * a Message, and serve_reports() calls on_ok(n) once for n such reports in a row. A failed message still
 * gets its own report (counter, error, Message), and calling the counter as a callback does what that
 * report means: on_error(err, msg), or on_ok(1) for a success. One entry per message stays in the ready
 * queue, so len(producer), flush() and the queue limits count as for any callback. */
typedef struct {
    PyObject_HEAD
    PyObject *on_ok;      /* on_ok(count) */
    PyObject *on_error;   /* on_error(err, msg) */
    PyObject *ok_report;  /* (self, None, None): a reference cycle, broken by tp_clear */
} DeliveryCounter;

static int counter_traverse(DeliveryCounter *self, visitproc visit, void *arg) {
    Py_VISIT(self->on_ok);
    Py_VISIT(self->on_error);
    Py_VISIT(self->ok_report);
    return 0;
}

static int counter_clear(DeliveryCounter *self) {
    Py_CLEAR(self->on_ok);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->ok_report);
    return 0;
}

static void counter_dealloc(DeliveryCounter *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    counter_clear(self);
    type->tp_free((PyObject *)self);
}

static int counter_init(DeliveryCounter *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"on_ok", "on_error", NULL};
    PyObject *on_ok, *on_error;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:DeliveryCounter", kwlist, &on_ok, &on_error)) return -1;
    if (!PyCallable_Check(on_ok) || !PyCallable_Check(on_error)) {
        PyErr_SetString(PyExc_TypeError, "DeliveryCounter(on_ok, on_error) needs two callables");
        return -1;
    }
    PyObject *report = PyTuple_Pack(3, (PyObject *)self, Py_None, Py_None);
    if (report == NULL) return -1;
    Py_INCREF(on_ok);
    Py_INCREF(on_error);
    Py_XSETREF(self->on_ok, on_ok);
    Py_XSETREF(self->on_error, on_error);
    Py_XSETREF(self->ok_report, report);
    return 0;
}

/* counter(err, msg): one report served on its own (not a run): on_ok(1) or on_error(err, msg). */
static PyObject *counter_call(DeliveryCounter *self, PyObject *args, PyObject *kwds) {
    PyObject *err, *msg;
    if (!PyArg_ParseTuple(args, "OO:DeliveryCounter", &err, &msg)) return NULL;
    if (self->on_ok == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "DeliveryCounter.__init__ was not called");
        return NULL;
    }
    if (err == Py_None) {
        PyObject *one = PyLong_FromLong(1);
        if (one == NULL) return NULL;
        PyObject *res = PyObject_CallOneArg(self->on_ok, one);
        Py_DECREF(one);
        return res;
    }
    PyObject *call_args[2] = {err, msg};
    return PyObject_Vectorcall(self->on_error, call_args, 2, NULL);
}

static PyMemberDef counter_members[] = {
    {"on_ok", T_OBJECT_EX, offsetof(DeliveryCounter, on_ok), READONLY, "on_ok(count): count messages delivered"},
    {"on_error", T_OBJECT_EX, offsetof(DeliveryCounter, on_error), READONLY, "on_error(err, msg): one failed"},
    {"ok_report", T_OBJECT_EX, offsetof(DeliveryCounter, ok_report), READONLY,
     "the shared ready-queue entry of one delivered message: (self, None, None)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject DeliveryCounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kqactors.native._native.DeliveryCounter",
    .tp_basicsize = sizeof(DeliveryCounter),
    .tp_dealloc = (destructor)counter_dealloc,
    .tp_call = (ternaryfunc)counter_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "DeliveryCounter(on_ok, on_error): a delivery callback that reports successes as counts "
              "(twin of kqactors.client.producer.buffers.PyDeliveryCounter).",
    .tp_traverse = (traverseproc)counter_traverse,
    .tp_clear = (inquiry)counter_clear,
    .tp_members = counter_members,
    .tp_init = (initproc)counter_init,
    .tp_new = PyType_GenericNew,
};

/* ======================================================================================================
 * ReadyQueue: the delivery reports waiting for poll(), a successful DR row kept as one run
 * ==================================================================================================== */

/* Why: at small messages the app thread bounds the producer, and a DR row of thousands of successes cost a
 * Message, a report tuple and a deque append each when it arrived, then a popleft and the tuple's release
 * when served — all of them built long before poll() and evicted from the cache meanwhile. ReadyQueue
 * keeps such a row as one ReportRun (the popped pending entries and their callbacks) and serve_reports()
 * builds each Message just before its callback, so it is freed while still in the cache. Seen from Python
 * it is the deque it replaces: one entry per message (len() counts messages, so flush() and the queue
 * limits are unchanged), append/appendleft/popleft/[i]/iteration/clear; whatever reads a run's reports
 * outside serve_reports() gets them built first, at the DR's arrival time (the latency a Message reports).
 * The Python twin is buffers.PyReadyQueue (a deque whose add_ok queues each report at once). */

typedef struct {
    long long msgid;
    PyObject *cb;      /* the callback to call (its own or the default), owned */
    PyObject *entry;   /* the popped pending entry, owned */
} RunItem;

typedef struct {
    PyObject_HEAD
    PyObject *topic, *partition, *ts_type;
    long long offset0;  /* the offset of msgid m is offset0 + m */
    double now;         /* when the DR arrived (a report's latency is now - its enqueue time) */
    Py_ssize_t pos, n;  /* items[pos:n] are still queued; items before pos were released */
    RunItem *items;
} ReportRun;

static void run_dealloc(ReportRun *self) {
    for (Py_ssize_t i = self->pos; i < self->n; i++) {
        Py_XDECREF(self->items[i].cb);
        Py_XDECREF(self->items[i].entry);
    }
    PyMem_Free(self->items);
    Py_XDECREF(self->topic);
    Py_XDECREF(self->partition);
    Py_XDECREF(self->ts_type);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Not under the cycle collector, as the report tuples it stands for (see "Cycle collector" in _native.c). */
static PyTypeObject ReportRunType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kqactors.native._native.ReportRun",
    .tp_basicsize = sizeof(ReportRun),
    .tp_dealloc = (destructor)run_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A successful delivery-report row waiting in a ReadyQueue (internal).",
};

static inline int is_counter_cb(PyObject *cb) {
    return Py_IS_TYPE(cb, &DeliveryCounterType) && ((DeliveryCounter *)cb)->ok_report != NULL;
}

/* The Message of run item i (a new reference, NULL on error); the item is left as it is. */
static PyObject *run_message(ReportRun *run, Py_ssize_t i) {
    RunItem *it = &run->items[i];
    PyObject *entry = it->entry;
    double enq = PyFloat_AsDouble(PyTuple_GET_ITEM(entry, P_ENQ));
    if (enq == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *offset = PyLong_FromLongLong(run->offset0 + it->msgid);
    PyObject *latency = PyFloat_FromDouble(run->now - enq);
    PyObject *timestamp = PyTuple_Pack(2, run->ts_type, PyTuple_GET_ITEM(entry, P_TS));
    PyObject *msg = NULL;
    if (offset != NULL && latency != NULL && timestamp != NULL) {
        PyObject *values[M_NSLOTS] = {
            run->topic, run->partition, offset, PyTuple_GET_ITEM(entry, P_KEY), PyTuple_GET_ITEM(entry, P_VALUE),
            PyTuple_GET_ITEM(entry, P_HEADERS), NULL, timestamp, latency, NULL};
        msg = new_message(values);
        if (msg != NULL) {
            PyObject_GC_UnTrack(timestamp);
            PyObject_GC_UnTrack(msg);
        }
    }
    Py_XDECREF(offset);
    Py_XDECREF(latency);
    Py_XDECREF(timestamp);
    return msg;
}

/* Run item i as the report complete_ok() would have queued (a new reference): a counter's shared
 * ok_report, else (callback, None, Message). */
static PyObject *run_report(ReportRun *run, Py_ssize_t i) {
    PyObject *cb = run->items[i].cb;
    if (is_counter_cb(cb)) {
        Py_INCREF(((DeliveryCounter *)cb)->ok_report);
        return ((DeliveryCounter *)cb)->ok_report;
    }
    PyObject *msg = run_message(run, i);
    if (msg == NULL) return NULL;
    PyObject *report = PyTuple_Pack(3, cb, Py_None, msg);
    Py_DECREF(msg);
    if (report != NULL) PyObject_GC_UnTrack(report);
    return report;
}

/* Releases the run's next item (served, or turned into a report of its own). */
static void run_advance(ReportRun *run) {
    RunItem *it = &run->items[run->pos++];
    Py_CLEAR(it->cb);
    Py_CLEAR(it->entry);
}

typedef struct {
    PyObject_HEAD
    PyObject **items;        /* a ring: report tuples and ReportRuns, owned */
    Py_ssize_t head, len, cap;
    Py_ssize_t nreports;     /* what len() says: one per message */
} ReadyQueue;

static PyTypeObject ReadyQueueType;

#define RQ_AT(q, i) ((q)->items[((q)->head + (i)) % (q)->cap])

static int rq_reserve(ReadyQueue *q) {
    if (q->len < q->cap) return 0;
    Py_ssize_t cap = q->cap ? q->cap * 2 : 64;
    PyObject **items = PyMem_New(PyObject *, cap);
    if (items == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < q->len; i++) items[i] = RQ_AT(q, i);
    PyMem_Free(q->items);
    q->items = items;
    q->head = 0;
    q->cap = cap;
    return 0;
}

/* Both steal obj; -1 (obj released) when out of memory. */
static int rq_push_back(ReadyQueue *q, PyObject *obj) {
    if (rq_reserve(q) < 0) {
        Py_DECREF(obj);
        return -1;
    }
    q->items[(q->head + q->len) % q->cap] = obj;
    q->len++;
    return 0;
}

static int rq_push_front(ReadyQueue *q, PyObject *obj) {
    if (rq_reserve(q) < 0) {
        Py_DECREF(obj);
        return -1;
    }
    q->head = (q->head + q->cap - 1) % q->cap;
    q->items[q->head] = obj;
    q->len++;
    return 0;
}

/* Removes the first item and returns it (the caller owns it). q->len > 0. */
static PyObject *rq_pop_front(ReadyQueue *q) {
    PyObject *obj = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return obj;
}

/* Makes the first report a tuple of its own (a run's next item is built and put in front of the run). */
static int rq_expand_head(ReadyQueue *q) {
    if (q->len == 0 || !Py_IS_TYPE(q->items[q->head], &ReportRunType)) return 0;
    ReportRun *run = (ReportRun *)q->items[q->head];
    PyObject *report = run_report(run, run->pos);
    if (report == NULL) return -1;
    if (rq_reserve(q) < 0) {  /* before any change: the push below cannot fail */
        Py_DECREF(report);
        return -1;
    }
    run_advance(run);
    if (run->pos == run->n) Py_DECREF(rq_pop_front(q));
    return rq_push_front(q, report);
}

/* Turns every run into its reports, in place (what Python code that looks inside the queue sees). */
static int rq_expand_all(ReadyQueue *q) {
    int any = 0;
    for (Py_ssize_t i = 0; i < q->len && !any; i++) any = Py_IS_TYPE(RQ_AT(q, i), &ReportRunType);
    if (!any) return 0;
    Py_ssize_t cap = 64;
    while (cap < q->nreports) cap *= 2;
    PyObject **items = PyMem_New(PyObject *, cap);
    if (items == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < q->len; i++) {
        PyObject *obj = RQ_AT(q, i);
        if (!Py_IS_TYPE(obj, &ReportRunType)) {
            Py_INCREF(obj);
            items[n++] = obj;
            continue;
        }
        ReportRun *run = (ReportRun *)obj;
        for (Py_ssize_t j = run->pos; j < run->n; j++) {
            PyObject *report = run_report(run, j);
            if (report == NULL) {
                while (n > 0) Py_DECREF(items[--n]);
                PyMem_Free(items);
                return -1;
            }
            items[n++] = report;
        }
    }
    for (Py_ssize_t i = 0; i < q->len; i++) Py_DECREF(RQ_AT(q, i));
    PyMem_Free(q->items);
    q->items = items;
    q->head = 0;
    q->len = n;
    q->cap = cap;
    return 0;
}

static int rq_traverse(ReadyQueue *q, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < q->len; i++) Py_VISIT(RQ_AT(q, i));
    return 0;
}

static int rq_clear_items(ReadyQueue *q) {
    PyObject **items = q->items;
    Py_ssize_t head = q->head, len = q->len, cap = q->cap;
    q->items = NULL;
    q->head = q->len = q->cap = q->nreports = 0;
    for (Py_ssize_t i = 0; i < len; i++) Py_DECREF(items[(head + i) % cap]);
    PyMem_Free(items);
    return 0;
}

static void rq_dealloc(ReadyQueue *q) {
    PyObject_GC_UnTrack(q);
    rq_clear_items(q);
    Py_TYPE(q)->tp_free((PyObject *)q);
}

static Py_ssize_t rq_length(ReadyQueue *q) {
    return q->nreports;
}

static PyObject *rq_append(ReadyQueue *q, PyObject *obj) {
    Py_INCREF(obj);
    if (rq_push_back(q, obj) < 0) return NULL;
    q->nreports++;
    Py_RETURN_NONE;
}

static PyObject *rq_appendleft(ReadyQueue *q, PyObject *obj) {
    Py_INCREF(obj);
    if (rq_push_front(q, obj) < 0) return NULL;
    q->nreports++;
    Py_RETURN_NONE;
}

static PyObject *rq_popleft(ReadyQueue *q, PyObject *Py_UNUSED(ignored)) {
    if (q->nreports == 0) {
        PyErr_SetString(PyExc_IndexError, "pop from an empty deque");
        return NULL;
    }
    if (rq_expand_head(q) < 0) return NULL;
    q->nreports--;
    return rq_pop_front(q);
}

static PyObject *rq_clear(ReadyQueue *q, PyObject *Py_UNUSED(ignored)) {
    rq_clear_items(q);
    Py_RETURN_NONE;
}

static PyObject *rq_item(ReadyQueue *q, Py_ssize_t i) {
    if (i < 0 || i >= q->nreports) {
        PyErr_SetString(PyExc_IndexError, "deque index out of range");
        return NULL;
    }
    if ((i == 0 ? rq_expand_head(q) : rq_expand_all(q)) < 0) return NULL;
    PyObject *obj = RQ_AT(q, i);
    Py_INCREF(obj);
    return obj;
}

static PyObject *rq_iter(ReadyQueue *q) {
    if (rq_expand_all(q) < 0) return NULL;
    PyObject *snapshot = PyList_New(q->len);
    if (snapshot == NULL) return NULL;
    for (Py_ssize_t i = 0; i < q->len; i++) {
        PyObject *obj = RQ_AT(q, i);
        Py_INCREF(obj);
        PyList_SET_ITEM(snapshot, i, obj);
    }
    PyObject *it = PyObject_GetIter(snapshot);
    Py_DECREF(snapshot);
    return it;
}

/* pending.pop(key, None): a new reference (Py_None when absent), NULL on error. */
static PyObject *pending_pop(PyObject *pending, PyObject *key) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *out = NULL;
    if (PyDict_Pop(pending, key, &out) < 0) return NULL;
    if (out == NULL) Py_RETURN_NONE;
    return out;
#else
    return _PyDict_Pop(pending, key, Py_None);
#endif
}

/* The arguments complete_ok() and ReadyQueue.add_ok() share: (pending, topic, partition, first, count,
 * base_offset, default_cb, now, ...), checked and converted once for both. */
typedef struct {
    PyObject *pending, *topic, *partition, *default_cb;
    long long first, count, base_offset;
    double now;
} OkRow;

static int parse_ok_row(const char *fn, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected, OkRow *row) {
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", fn, expected, nargs);
        return -1;
    }
    if (message_type == NULL) {
        PyErr_Format(PyExc_RuntimeError, "%s(): bind_message() was not called", fn);
        return -1;
    }
    row->pending = args[0];
    row->topic = args[1];
    row->partition = args[2];
    row->default_cb = args[6];
    if (!PyDict_Check(row->pending)) {
        PyErr_Format(PyExc_TypeError, "%s(): pending must be a dict", fn);
        return -1;
    }
    if ((row->first = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred()) return -1;
    if ((row->count = PyLong_AsLongLong(args[4])) == -1 && PyErr_Occurred()) return -1;
    if ((row->base_offset = PyLong_AsLongLong(args[5])) == -1 && PyErr_Occurred()) return -1;
    if ((row->now = PyFloat_AsDouble(args[7])) == -1.0 && PyErr_Occurred()) return -1;
    return 0;
}

/* A popped pending entry's size and the callback its report goes to (its own, else default_cb: Python's
 * `or`, a falsy callback counts as none; Py_None: no report). -1 with an exception on a malformed entry. */
static int ok_entry(const char *fn, PyObject *entry, PyObject *default_cb, Py_ssize_t *size, PyObject **callback) {
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != P_LEN) {
        PyErr_Format(PyExc_TypeError, "%s(): malformed pending entry", fn);
        return -1;
    }
    *size = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, P_SIZE));
    if (*size == -1 && PyErr_Occurred()) return -1;
    PyObject *own = PyTuple_GET_ITEM(entry, P_CB);
    int truth = own == Py_None ? 0 : PyObject_IsTrue(own);
    if (truth < 0) return -1;
    *callback = truth ? own : default_cb;
    return 0;
}

/* add_ok(pending, topic, partition, first, count, base_offset, default_cb, now, create_time_type)
 *     -> (done, freed)
 * complete_ok() of a whole row (read that, and producer_buffers._complete_ok_py, for the semantics): every
 * msgid still pending is popped and counted the same way, but the reports are queued as one run whose
 * Messages are built when served. Caller holds ProducerBuffers.lock. */
static PyObject *rq_add_ok(ReadyQueue *q, PyObject *const *args, Py_ssize_t nargs) {
    OkRow row;
    if (parse_ok_row("add_ok", args, nargs, 9, &row) < 0) return NULL;
    PyObject *pending = row.pending, *default_cb = row.default_cb;
    long long first = row.first, count = row.count;
    if (count < 0 || count > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(RunItem)) {
        PyErr_SetString(PyExc_ValueError, "add_ok(): count out of range");
        return NULL;
    }
    ReportRun *run = PyObject_New(ReportRun, &ReportRunType);
    if (run == NULL) return NULL;
    run->items = count ? PyMem_New(RunItem, (size_t)count) : NULL;
    run->pos = run->n = 0;
    Py_INCREF(args[1]);
    Py_INCREF(args[2]);
    Py_INCREF(args[8]);
    run->topic = args[1];
    run->partition = args[2];
    run->ts_type = args[8];
    run->offset0 = row.base_offset - first;
    run->now = row.now;
    if (count && run->items == NULL) {
        Py_DECREF(run);
        return PyErr_NoMemory();
    }
    if (rq_reserve(q) < 0) {  /* before any entry leaves pending: the push below cannot fail */
        Py_DECREF(run);
        return NULL;
    }
    Py_ssize_t done = 0, freed = 0;
    int failed = 0;
    for (long long msgid = first; msgid < first + count; msgid++) {
        PyObject *key = PyLong_FromLongLong(msgid);
        if (key == NULL) {
            failed = 1;
            break;
        }
        PyObject *entry = pending_pop(pending, key);  /* one look-up, not a get and a delete */
        if (entry == NULL || entry == Py_None) {
            Py_DECREF(key);
            Py_XDECREF(entry);
            if (entry == NULL) {
                failed = 1;
                break;
            }
            continue;  /* already reported (e.g. purged locally) */
        }
        Py_ssize_t size;
        PyObject *callback;
        if (ok_entry("add_ok", entry, default_cb, &size, &callback) < 0) {
            /* back where it was, pending, as complete_ok leaves an entry it fails on */
            PyObject *exc_type, *exc_value, *exc_tb;
            PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
            int lost = PyDict_SetItem(pending, key, entry) < 0;
            if (lost) {
                Py_XDECREF(exc_type);
                Py_XDECREF(exc_value);
                Py_XDECREF(exc_tb);
            } else {
                PyErr_Restore(exc_type, exc_value, exc_tb);
            }
            Py_DECREF(entry);
            Py_DECREF(key);
            failed = 1;
            break;
        }
        Py_DECREF(key);
        done++;
        freed += size;
        if (callback == Py_None) {
            Py_DECREF(entry);
            continue;
        }
        Py_INCREF(callback);
        run->items[run->n++] = (RunItem){msgid, callback, entry};
    }
    /* What left pending is counted and queued even when a later msgid failed (as complete_ok's caller
     * counts what was done): the run goes in, then the error is raised. */
    if (run->n) {
        rq_push_back(q, (PyObject *)run);  /* room reserved: cannot fail */
        q->nreports += run->n;
    } else {
        Py_DECREF(run);
    }
    if (failed) return NULL;
    return Py_BuildValue("(nn)", done, freed);
}

/* The counter whose shared ok_report is the next report, or NULL (also when the queue is empty). */
static DeliveryCounter *rq_head_counter(ReadyQueue *q) {
    if (q->len == 0) return NULL;
    PyObject *obj = q->items[q->head];
    if (Py_IS_TYPE(obj, &ReportRunType)) {
        ReportRun *run = (ReportRun *)obj;
        PyObject *cb = run->items[run->pos].cb;
        return is_counter_cb(cb) ? (DeliveryCounter *)cb : NULL;
    }
    if (PyTuple_CheckExact(obj) && PyTuple_GET_SIZE(obj) == 3) {
        PyObject *cb = PyTuple_GET_ITEM(obj, 0);
        if (is_counter_cb(cb) && obj == ((DeliveryCounter *)cb)->ok_report) return (DeliveryCounter *)cb;
    }
    return NULL;
}

/* Drops the next report unbuilt (one of a counter's successes, counted by the caller). */
static void rq_drop_head(ReadyQueue *q) {
    PyObject *obj = q->items[q->head];
    if (Py_IS_TYPE(obj, &ReportRunType)) {
        ReportRun *run = (ReportRun *)obj;
        run_advance(run);
        if (run->pos == run->n) Py_DECREF(rq_pop_front(q));
    } else {
        Py_DECREF(rq_pop_front(q));
    }
    q->nreports--;
}

/* serve_reports() on a ReadyQueue: the same order, counter runs and error rule, without building a
 * report tuple for a run's items (each Message is built right before its callback). */
static PyObject *rq_serve(ReadyQueue *q) {
    Py_ssize_t served = 0;
    while (q->len) {
        DeliveryCounter *counter = rq_head_counter(q);
        PyObject *res;
        if (counter != NULL) {
            Py_INCREF(counter);  /* dropping its reports may release the last other reference */
            Py_ssize_t run = 0;
            do {
                rq_drop_head(q);
                run++;
            } while (rq_head_counter(q) == counter);
            served += run;
            PyObject *n = PyLong_FromSsize_t(run);
            res = n == NULL ? NULL : PyObject_CallOneArg(counter->on_ok, n);
            Py_XDECREF(n);
            Py_DECREF(counter);
        } else if (Py_IS_TYPE(q->items[q->head], &ReportRunType)) {
            ReportRun *run = (ReportRun *)q->items[q->head];
            Py_INCREF(run);  /* popping it below must not free what the call uses */
            PyObject *msg = run_message(run, run->pos);
            if (msg == NULL) {
                Py_DECREF(run);
                return NULL;
            }
            PyObject *cb = run->items[run->pos].cb;
            Py_INCREF(cb);
            run_advance(run);
            if (run->pos == run->n) Py_DECREF(rq_pop_front(q));
            q->nreports--;
            served++;
            PyObject *call_args[2] = {Py_None, msg};
            res = PyObject_Vectorcall(cb, call_args, 2, NULL);
            Py_DECREF(cb);
            Py_DECREF(msg);
            Py_DECREF(run);
        } else {
            PyObject *report = rq_pop_front(q);
            q->nreports--;
            if (!PyTuple_Check(report) || PyTuple_GET_SIZE(report) != 3) {
                Py_DECREF(report);
                PyErr_SetString(PyExc_TypeError, "serve_reports(): a report must be (callback, error, message)");
                return NULL;
            }
            served++;
            PyObject *call_args[2] = {PyTuple_GET_ITEM(report, 1), PyTuple_GET_ITEM(report, 2)};
            res = PyObject_Vectorcall(PyTuple_GET_ITEM(report, 0), call_args, 2, NULL);
            Py_DECREF(report);
        }
        if (res == NULL) return NULL;
        Py_DECREF(res);
    }
    return PyLong_FromSsize_t(served);
}

static PyMethodDef rq_methods[] = {
    {"append", (PyCFunction)rq_append, METH_O, "append(report): queue one (callback, error, message) last"},
    {"appendleft", (PyCFunction)rq_appendleft, METH_O, "appendleft(report): queue one report first"},
    {"popleft", (PyCFunction)rq_popleft, METH_NOARGS, "popleft() -> the first report (IndexError when empty)"},
    {"clear", (PyCFunction)rq_clear, METH_NOARGS, "clear(): drop every report"},
    {"add_ok", (PyCFunction)(void (*)(void))rq_add_ok, METH_FASTCALL,
     "add_ok(pending, topic, partition, first, count, base_offset, default_cb, now, create_time_type) -> "
     "(done, freed): complete_ok() of a DR row, its reports queued as one run built when served"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods rq_as_sequence = {
    .sq_length = (lenfunc)rq_length,
    .sq_item = (ssizeargfunc)rq_item,
};

static PyTypeObject ReadyQueueType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kqactors.native._native.ReadyQueue",
    .tp_basicsize = sizeof(ReadyQueue),
    .tp_dealloc = (destructor)rq_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "ReadyQueue(): the producer's delivery reports waiting for poll(), a deque of (callback, error, "
              "message) to Python; a successful DR row is one run whose Messages are built when served "
              "(twin of kqactors.client.producer.buffers.PyReadyQueue).",
    .tp_traverse = (traverseproc)rq_traverse,
    .tp_clear = (inquiry)rq_clear_items,
    .tp_as_sequence = &rq_as_sequence,
    .tp_iter = (getiterfunc)rq_iter,
    .tp_methods = rq_methods,
    .tp_new = PyType_GenericNew,
};

static Py_ssize_t ready_length(PyObject *ready) {
    if (Py_IS_TYPE(ready, &ReadyQueueType)) return ((ReadyQueue *)ready)->nreports;
    return PyObject_Size(ready);
}

static PyObject *str_popleft;

/* serve_reports(ready) -> int
 *
 * Twin of the loop in Producer._serve_ready (kqactors/client/producer/producer.py): pops reports (callback,
 * error, message) off the deque ``ready`` oldest first and calls callback(error, message); a run of one
 * DeliveryCounter's ok_report entries becomes one on_ok(n). Returns the number of reports served. An
 * exception from a callback propagates at once; the reports after it stay queued (a run's entries are all
 * popped before its call). The caller holds the serving lock. */
static PyObject *serve_reports(PyObject *Py_UNUSED(module), PyObject *ready) {
    if (Py_IS_TYPE(ready, &ReadyQueueType)) return rq_serve((ReadyQueue *)ready);
    PyObject *popleft = PyObject_GetAttr(ready, str_popleft);
    if (popleft == NULL) return NULL;
    Py_ssize_t served = 0;
    for (;;) {
        Py_ssize_t n = PyObject_Size(ready);
        if (n < 0) goto fail;
        if (n == 0) break;
        PyObject *report = PyObject_CallNoArgs(popleft);
        if (report == NULL) goto fail;
        if (!PyTuple_Check(report) || PyTuple_GET_SIZE(report) != 3) {
            Py_DECREF(report);
            PyErr_SetString(PyExc_TypeError, "serve_reports(): a report must be (callback, error, message)");
            goto fail;
        }
        PyObject *cb = PyTuple_GET_ITEM(report, 0), *res;
        served++;
        if (Py_IS_TYPE(cb, &DeliveryCounterType) && report == ((DeliveryCounter *)cb)->ok_report) {
            /* A run of this counter's successes: pop the ones that follow, then one on_ok(count). */
            Py_ssize_t run = 1;
            while (--n > 0) {
                PyObject *next = PySequence_GetItem(ready, 0);
                if (next == NULL) {
                    Py_DECREF(report);
                    goto fail;
                }
                Py_DECREF(next);  /* the deque keeps it alive; only its identity is compared */
                if (next != report) break;
                PyObject *popped = PyObject_CallNoArgs(popleft);
                if (popped == NULL) {
                    Py_DECREF(report);
                    goto fail;
                }
                Py_DECREF(popped);
                run++;
            }
            served += run - 1;
            PyObject *count = PyLong_FromSsize_t(run);
            if (count == NULL) {
                Py_DECREF(report);
                goto fail;
            }
            res = PyObject_CallOneArg(((DeliveryCounter *)cb)->on_ok, count);
            Py_DECREF(count);
        } else {
            PyObject *call_args[2] = {PyTuple_GET_ITEM(report, 1), PyTuple_GET_ITEM(report, 2)};
            res = PyObject_Vectorcall(cb, call_args, 2, NULL);
        }
        Py_DECREF(report);
        if (res == NULL) goto fail;
        Py_DECREF(res);
    }
    Py_DECREF(popleft);
    return PyLong_FromSsize_t(served);
fail:
    Py_DECREF(popleft);
    return NULL;
}

/* ======================================================================================================
 * Delivery reports
 * ==================================================================================================== */

/* complete_ok(pending, topic, partition, first, count, base_offset, default_cb, now, ready_append,
 *             create_time_type) -> (done, freed)
 *
 * Twin of producer_buffers._complete_ok_py (read that for the semantics): msgids first .. first+count-1
 * were written at base_offset onwards with no error and CreateTime. Each one still pending is popped
 * (a missing one was reported already: skipped, so each message gets exactly one report), its size is
 * freed, and when it has a callback (its own, else default_cb) ready_append((callback, None, Message))
 * is called. Caller holds ProducerBuffers.lock. */
PyObject *complete_ok(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    OkRow row;
    if (parse_ok_row("complete_ok", args, nargs, 10, &row) < 0) return NULL;
    PyObject *pending = row.pending, *topic = row.topic, *partition = row.partition, *default_cb = row.default_cb;
    PyObject *ready_append = args[8], *ts_type = args[9];
    long long first = row.first, count = row.count, base_offset = row.base_offset;
    double now = row.now;

    Py_ssize_t done = 0, freed = 0;
    for (long long msgid = first; msgid < first + count; msgid++) {
        PyObject *key = PyLong_FromLongLong(msgid);
        if (key == NULL) return NULL;
        PyObject *entry = PyDict_GetItemWithError(pending, key);  /* borrowed */
        if (entry == NULL) {
            Py_DECREF(key);
            if (PyErr_Occurred()) return NULL;
            continue;  /* already reported (e.g. purged locally) */
        }
        Py_INCREF(entry);  /* keep it alive past its removal from the dict */
        if (PyDict_DelItem(pending, key) < 0) {
            Py_DECREF(entry);
            Py_DECREF(key);
            return NULL;
        }
        Py_DECREF(key);
        Py_ssize_t size;
        PyObject *callback;
        if (ok_entry("complete_ok", entry, default_cb, &size, &callback) < 0) {
            Py_DECREF(entry);
            return NULL;
        }
        done++;
        freed += size;
        if (callback == Py_None) {
            Py_DECREF(entry);
            continue;
        }
        if (Py_IS_TYPE(callback, &DeliveryCounterType) && ((DeliveryCounter *)callback)->ok_report != NULL) {
            /* A counter: its shared report, no Message (see DeliveryCounter). */
            PyObject *res = PyObject_CallOneArg(ready_append, ((DeliveryCounter *)callback)->ok_report);
            Py_DECREF(entry);
            if (res == NULL) return NULL;
            Py_DECREF(res);
            continue;
        }
        double enq = PyFloat_AsDouble(PyTuple_GET_ITEM(entry, P_ENQ));
        if (enq == -1.0 && PyErr_Occurred()) {
            Py_DECREF(entry);
            return NULL;
        }
        PyObject *offset = PyLong_FromLongLong(base_offset + (msgid - first));
        PyObject *latency = PyFloat_FromDouble(now - enq);
        PyObject *timestamp = PyTuple_Pack(2, ts_type, PyTuple_GET_ITEM(entry, P_TS));
        PyObject *msg = NULL, *report = NULL, *res = NULL;
        if (offset != NULL && latency != NULL && timestamp != NULL) {
            PyObject *values[M_NSLOTS] = {
                topic, partition, offset, PyTuple_GET_ITEM(entry, P_KEY), PyTuple_GET_ITEM(entry, P_VALUE),
                PyTuple_GET_ITEM(entry, P_HEADERS), NULL, timestamp, latency, NULL};
            msg = new_message(values);  /* takes its own references */
        }
        if (msg != NULL) report = PyTuple_Pack(3, callback, Py_None, msg);
        if (report != NULL) {  /* untracked: see "Cycle collector" at the top */
            PyObject_GC_UnTrack(timestamp);
            PyObject_GC_UnTrack(msg);
            PyObject_GC_UnTrack(report);
            res = PyObject_CallOneArg(ready_append, report);
        }
        /* Every temporary is released on success and on failure alike. */
        Py_XDECREF(offset);
        Py_XDECREF(latency);
        Py_XDECREF(timestamp);
        Py_XDECREF(msg);
        Py_XDECREF(report);
        Py_DECREF(entry);
        if (res == NULL) return NULL;
        Py_DECREF(res);
    }
    return Py_BuildValue("(nn)", done, freed);
}


/* ======================================================================================================
 * Registration
 * ==================================================================================================== */

int producer_buffers_register(PyObject *m) {
    if (PyType_Ready(&PackerType) < 0 || PyType_Ready(&BuffersType) < 0 || PyType_Ready(&FastLockType) < 0) return -1;
    if (StructError == NULL && (StructError = import_attr("struct", "error")) == NULL) return -1;
    if (monotonic == NULL && (monotonic = import_attr("time", "monotonic")) == NULL) return -1;
    if (str_acquire == NULL) {
        if ((str_acquire = PyUnicode_InternFromString("acquire")) == NULL ||
            (str_release = PyUnicode_InternFromString("release")) == NULL ||
            (str_next_msgid = PyUnicode_InternFromString("next_msgid")) == NULL ||
            (str_packer = PyUnicode_InternFromString("packer")) == NULL ||
            (str_pending = PyUnicode_InternFromString("pending")) == NULL ||
            (str_new_buffer = PyUnicode_InternFromString("_new_buffer")) == NULL)
            return -1;
    }
    if (PyType_Ready(&DeliveryCounterType) < 0 || PyType_Ready(&ReportRunType) < 0 ||
        PyType_Ready(&ReadyQueueType) < 0)
        return -1;
    if (str_popleft == NULL && (str_popleft = PyUnicode_InternFromString("popleft")) == NULL) return -1;
    if (add_type(m, "Packer", &PackerType) < 0 || add_type(m, "Buffers", &BuffersType) < 0 ||
        add_type(m, "DeliveryCounter", &DeliveryCounterType) < 0 || add_type(m, "ReadyQueue", &ReadyQueueType) < 0 ||
        add_type(m, "Lock", &FastLockType) < 0)
        return -1;
    static PyMethodDef functions[] = {
        {"serve_reports", (PyCFunction)serve_reports, METH_O,
         "serve_reports(ready) -> int: call the queued delivery reports' callbacks, oldest first (a run of one "
         "DeliveryCounter's successes as one on_ok(n)); the caller holds the serving lock."},
        {NULL, NULL, 0, NULL},
    };
    return PyModule_AddFunctions(m, functions);
}
