/* kqactors._native: optional C speed-ups of the app-side per-message work of the producer and consumer.
 *
 * Runs in: the app process (toppar hosts load it with consumer_core.packing but call nothing here).
 * Everything here has a pure-Python twin that stays the reference (DESIGN.md §3 rule 6); kqactors/native.py
 * picks this module when it imports and KQACTORS_NATIVE is not "0", and the unit tests run both and compare
 * them (byte for byte, Message for Message).
 *
 *   Packer           twin of producer_core.packing.PyMessagePacker: appends messages to one growing
 *                    buffer in the layout of kqactors/records/packed.py (the toppar reads it), and with
 *                    append_pending() also records the message's pending entry in the same call.
 *   Buffers          C base of producer_buffers.NativeProducerBuffers: its counters as C members and
 *                    append() (once per produce(): limits, msgid, packing, pending entry) in one call.
 *   complete_ok()    twin of producer_buffers._complete_ok_py: the delivery-report loop of a successful
 *                    CreateTime batch — pops pending entries and builds Message objects.
 *   take_entries()   twin of consumer_core.packing._take_entries_py: the per-entry loop of
 *                    MessageBatch.take(), turning a fetched-messages frame's entries into Message objects
 *                    (error and EOF events, rare, through the same Python helper the twin calls).
 *   bind_message()   tells this module which class is kqactors.message.Message and where its slots live.
 *   track()          puts an object left untracked (below) back under the cycle collector.
 *   ProducerCore     C base of producer.Producer: the state produce() reads as members, and produce()
 *                    itself for the common case (str topic, bytes/None key and value, no headers, known
 *                    partition count); every other call goes, before any side effect, to
 *                    Producer._produce_py, the Python body, which stays the reference.
 *
 * Cycle collector: the objects made per message (pending entries, delivery-report Messages and the tuples
 * that carry them, consumed Messages and their timestamp tuples) are untracked. Tens of thousands are
 * alive at a time (in flight, waiting for poll(), or in the lists consume() returns), and tracked they
 * survived young collections, got promoted and made each full collection scan them all: ~35 % of the
 * producer's app-thread CPU at 100 B, 20-30 % of the consumer's, with pauses of ~30 ms. They hold atoms
 * (bytes, str, ints, a float, a tuple of ints), a header list and the app's callback, so no cycle can pass
 * through them while they are ours; the Message setters that store arbitrary objects call track() first
 * (kqactors/message.py). A consumed Message's header list stays tracked (see decode_headers()).
 *
 * Thread safety: Buffers.append takes ProducerBuffers.lock (a threading.Lock) like its Python twin; the
 * rest of the producer's part runs with the caller holding it. The GIL is released only while waiting for
 * that lock (and by the Python code ProducerCore.produce calls: the partitioner, the hand-over, the
 * flusher's Event). take_entries() only reads its (immutable) frame and builds new objects.
 *
 * Producer frame layout (little-endian, see records/packed.py):
 *   int64 timestamp_ms | int32 key_len (-1 = null) | int32 value_len (-1 = null) | uint16 header_count
 *   key | value | header_count x (uint16 name_len | int32 value_len (-1 = null) | name utf-8 | value)
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#define ENTRY_SIZE 18          /* struct "<qiiH" */
#define HEADER_SIZE 6          /* struct "<Hi" */
#define SEGMENT_BYTES (64 * 1024)
#define KEEP_CAPACITY (256 * 1024)  /* take() keeps a buffer up to this size for the next frame */

/* Pending entry layout, as producer_buffers: (key, value, headers, timestamp, callback, enq_time, size). */
enum { P_KEY, P_VALUE, P_HEADERS, P_TS, P_CB, P_ENQ, P_SIZE, P_LEN };

static PyObject *import_attr(const char *module, const char *name);

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
    .tp_name = "kqactors._native.Packer",
    .tp_basicsize = sizeof(Packer),
    .tp_dealloc = (destructor)packer_dealloc,
    .tp_as_sequence = &packer_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "C twin of kqactors.producer_core.packing.PyMessagePacker (not thread-safe by itself).",
    .tp_methods = packer_methods,
    .tp_members = packer_members,
    .tp_getset = packer_getset,
    .tp_init = (initproc)packer_init,
    .tp_new = PyType_GenericNew,
};

/* ======================================================================================================
 * Buffers: the C base of producer_buffers' native ProducerBuffers
 * ==================================================================================================== */

/* Holds the counters and containers ProducerBuffers' Python methods use (as plain attributes: the
 * members below), so append() — once per produce() — reads them without attribute look-ups. The Python
 * subclass (producer_buffers.NativeProducerBuffers) inherits every other method from ProducerBuffers. */
typedef struct {
    PyObject_HEAD
    PyObject *lock;         /* threading.Lock guarding append/take/complete */
    PyObject *partitions;   /* dict (topic, partition) -> PartitionBuffer */
    PyObject *ready;        /* deque of delivery reports */
    Py_ssize_t max_messages, max_bytes, count, nbytes, unsent;
} Buffers;

static int buffers_traverse(Buffers *self, visitproc visit, void *arg) {
    Py_VISIT(self->lock);
    Py_VISIT(self->partitions);
    Py_VISIT(self->ready);
    return 0;
}

static int buffers_clear(Buffers *self) {
    Py_CLEAR(self->lock);
    Py_CLEAR(self->partitions);
    Py_CLEAR(self->ready);
    return 0;
}

static void buffers_dealloc(Buffers *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    buffers_clear(self);
    type->tp_free((PyObject *)self);
}

/* The locked part of append(); returns 1 appended, 0 no room, -1 error. Caller holds the lock. */
static int buffers_append_locked(Buffers *self, PyObject *const *args, int reserved, PyObject *now) {
    PyObject *topic = args[0], *partition = args[1], *key = args[2], *value = args[3], *headers = args[4];
    PyObject *timestamp = args[5], *callback = args[6], *size_obj = args[7];
    if (self->partitions == NULL || self->ready == NULL || !PyDict_Check(self->partitions)) {
        PyErr_SetString(PyExc_RuntimeError, "ProducerBuffers is not initialised");
        return -1;
    }
    Py_ssize_t size = PyLong_AsSsize_t(size_obj);
    if (size == -1 && PyErr_Occurred()) return -1;
    if (!reserved) {
        Py_ssize_t nready = PyObject_Size(self->ready);
        if (nready < 0) return -1;
        if ((self->max_messages && self->count + nready >= self->max_messages) ||
            (self->nbytes + size > self->max_bytes && self->count > 0))
            return 0;
    }
    PyObject *tp = PyTuple_Pack(2, topic, partition);
    if (tp == NULL) return -1;
    PyObject *buf = PyDict_GetItemWithError(self->partitions, tp);  /* borrowed */
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
    int rc = -1;
    PyObject *msgid = NULL, *next = NULL, *packer = NULL, *pending = NULL, *res = NULL;
    if ((msgid = PyObject_GetAttr(buf, str_next_msgid)) == NULL) goto done;
    if ((packer = PyObject_GetAttr(buf, str_packer)) == NULL) goto done;
    if ((pending = PyObject_GetAttr(buf, str_pending)) == NULL) goto done;
    if (!PyObject_TypeCheck(packer, &PackerType) || !PyDict_Check(pending)) {
        PyErr_SetString(PyExc_TypeError, "native ProducerBuffers needs a native Packer and a dict of pending");
        goto done;
    }
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

/* append(topic, partition, key, value, headers, timestamp, callback, size, reserved=False) -> bool
 * Twin of ProducerBuffers.append (read that for the semantics). */
static PyObject *buffers_append(Buffers *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
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
    PyObject *now = PyObject_CallNoArgs(monotonic);
    if (now == NULL) return NULL;
    PyObject *lock = self->lock;
    Py_INCREF(lock);  /* the attribute could be replaced while we hold it */
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

static PyTypeObject BuffersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kqactors._native.Buffers",
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
 * Delivery reports
 * ==================================================================================================== */

/* kqactors.message.Message and the byte offsets of its slots, set by bind_message(). Message instances
 * are built by allocating one and storing into its slots directly, skipping the Python __init__ frame;
 * the stored values are exactly what Message.__init__ would store. */
enum { M_TOPIC, M_PARTITION, M_OFFSET, M_KEY, M_VALUE, M_HEADERS, M_ERROR, M_TIMESTAMP, M_LATENCY,
       M_LEADER_EPOCH, M_NSLOTS };
static const char *const message_slot_names[M_NSLOTS] = {
    "_topic", "_partition", "_offset", "_key", "_value", "_headers", "_error", "_timestamp", "_latency",
    "_leader_epoch"};
static PyTypeObject *message_type = NULL;  /* strong reference */
static Py_ssize_t message_offsets[M_NSLOTS];

static PyObject *bind_message(PyObject *Py_UNUSED(module), PyObject *cls) {
    Py_ssize_t offsets[M_NSLOTS];
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "bind_message() needs a class");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "bind_message(): the class must have __slots__ and no __dict__");
        return NULL;
    }
    for (int i = 0; i < M_NSLOTS; i++) {
        PyObject *descr = PyObject_GetAttrString(cls, message_slot_names[i]);
        if (descr == NULL) return NULL;
        if (!Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            Py_DECREF(descr);
            PyErr_Format(PyExc_TypeError, "bind_message(): %s is not a plain slot", message_slot_names[i]);
            return NULL;
        }
        offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (offsets[i] < (Py_ssize_t)sizeof(PyObject) ||
            offsets[i] + (Py_ssize_t)sizeof(PyObject *) > type->tp_basicsize) {
            PyErr_Format(PyExc_TypeError, "bind_message(): odd offset of %s", message_slot_names[i]);
            return NULL;
        }
    }
    memcpy(message_offsets, offsets, sizeof(offsets));
    Py_INCREF(cls);
    Py_XSETREF(message_type, type);
    Py_RETURN_NONE;
}

/* A new Message; `values` are borrowed, NULL meaning None. Returns a new reference or NULL. */
static PyObject *new_message(PyObject *const values[M_NSLOTS]) {
    PyObject *msg = message_type->tp_alloc(message_type, 0);  /* zeroed slots */
    if (msg == NULL) return NULL;
    for (int i = 0; i < M_NSLOTS; i++) {
        PyObject *v = values[i] ? values[i] : Py_None;
        Py_INCREF(v);
        *(PyObject **)((char *)msg + message_offsets[i]) = v;
    }
    return msg;
}

/* complete_ok(pending, topic, partition, first, count, base_offset, default_cb, now, ready_append,
 *             create_time_type) -> (done, freed)
 *
 * Twin of producer_buffers._complete_ok_py (read that for the semantics): msgids first .. first+count-1
 * were written at base_offset onwards with no error and CreateTime. Each one still pending is popped
 * (a missing one was reported already: skipped, so each message gets exactly one report), its size is
 * freed, and when it has a callback (its own, else default_cb) ready_append((callback, None, Message))
 * is called. Caller holds ProducerBuffers.lock. */
static PyObject *complete_ok(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "complete_ok() takes 10 arguments (%zd given)", nargs);
        return NULL;
    }
    if (message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "complete_ok(): bind_message() was not called");
        return NULL;
    }
    PyObject *pending = args[0], *topic = args[1], *partition = args[2], *default_cb = args[6];
    PyObject *ready_append = args[8], *ts_type = args[9];
    if (!PyDict_Check(pending)) {
        PyErr_SetString(PyExc_TypeError, "complete_ok(): pending must be a dict");
        return NULL;
    }
    long long first = PyLong_AsLongLong(args[3]);
    if (first == -1 && PyErr_Occurred()) return NULL;
    long long count = PyLong_AsLongLong(args[4]);
    if (count == -1 && PyErr_Occurred()) return NULL;
    long long base_offset = PyLong_AsLongLong(args[5]);
    if (base_offset == -1 && PyErr_Occurred()) return NULL;
    double now = PyFloat_AsDouble(args[7]);
    if (now == -1.0 && PyErr_Occurred()) return NULL;

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
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != P_LEN) {
            Py_DECREF(entry);
            PyErr_SetString(PyExc_TypeError, "complete_ok(): malformed pending entry");
            return NULL;
        }
        Py_ssize_t size = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, P_SIZE));
        if (size == -1 && PyErr_Occurred()) {
            Py_DECREF(entry);
            return NULL;
        }
        done++;
        freed += size;
        /* callback = entry's callback or default_cb (Python's `or`: a falsy callback counts as none). */
        PyObject *callback = PyTuple_GET_ITEM(entry, P_CB);
        if (callback != Py_None) {
            int truth = PyObject_IsTrue(callback);
            if (truth < 0) {
                Py_DECREF(entry);
                return NULL;
            }
            if (!truth) callback = default_cb;
        } else {
            callback = default_cb;
        }
        if (callback == Py_None) {
            Py_DECREF(entry);
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

/* track(obj): put an object this module left untracked back under the cycle collector. Message setters
 * call it before storing an arbitrary object, so a cycle through a delivery report stays collectable. */
static PyObject *track(PyObject *Py_UNUSED(module), PyObject *obj) {
    if (PyObject_IS_GC(obj) && !PyObject_GC_IsTracked(obj)) PyObject_GC_Track(obj);
    Py_RETURN_NONE;
}

/* ======================================================================================================
 * Consumer: taking entries of a fetched-messages frame
 * ==================================================================================================== */

/* Frame layout of kqactors/consumer_core/packing.py (read its docstring): uint32 count, then count
 * entries "<qqiiiiiBi", then the data section the entries' positions point into. */
#define FRAME_COUNT_SIZE 4
#define FRAME_ENTRY_SIZE 41  /* 8 + 8 + 5 x 4 + 1 + 4 */
enum { KIND_ERROR = 0x10, KIND_EOF = 0x11, KIND_SKIP = 0x12 };  /* as packing.py; other kinds >= 0x10: EOF */

/* kqactors.records.errors.CorruptRecordError, imported when first raised. */
static PyObject *CorruptRecordError;

/* Raises CorruptRecordError (a ValueError) with a printf-style message; always returns -1. The import is
 * lazy because only a malformed frame needs it (so importing this module imports nothing of kqactors). */
static int corrupt(const char *format, ...) {
    if (CorruptRecordError == NULL &&
        (CorruptRecordError = import_attr("kqactors.records.errors", "CorruptRecordError")) == NULL)
        return -1;  /* the import error is the one raised */
    va_list va;
    va_start(va, format);
    PyErr_FormatV(CorruptRecordError, format, va);
    va_end(va);
    return -1;
}

static inline int32_t get_i32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static inline int64_t get_i64(const unsigned char *p) {
    return (int64_t)((uint64_t)(uint32_t)get_i32(p) | (uint64_t)(uint32_t)get_i32(p + 4) << 32);
}

typedef struct {
    int64_t offset, timestamp;
    int32_t key_pos, key_len, value_pos, value_len, headers_pos, leader_epoch;
    unsigned char kind;
} Entry;

static void read_entry(const unsigned char *p, Entry *e) {
    e->offset = get_i64(p);
    e->timestamp = get_i64(p + 8);
    e->key_pos = get_i32(p + 16);
    e->key_len = get_i32(p + 20);
    e->value_pos = get_i32(p + 24);
    e->value_len = get_i32(p + 28);
    e->headers_pos = get_i32(p + 32);
    e->kind = p[36];
    e->leader_epoch = get_i32(p + 37);
}

/* The data section and what the entries of one take() share. */
typedef struct {
    const unsigned char *frame;
    Py_ssize_t frame_len;
    Py_ssize_t data_start;      /* entry positions are relative to it */
    PyObject *topic, *partition;
    /* Consecutive messages usually carry the same (kind, timestamp) (a producer batch written in one
     * millisecond) and the same leader epoch: they share one tuple / int instead of building their own.
     * Both are immutable, so sharing is invisible except to `is`. Owned, NULL until first built. */
    PyObject *timestamp;
    int64_t ts_value;
    int ts_kind;
    PyObject *epoch;
    int32_t epoch_value;
} Take;

/* data[pos:pos+len] as bytes in *out, or None (NULL) when len < 0, as the Python twin's slices; a slice
 * outside the data section is a corrupt frame (where Python's slicing would quietly cut it short). */
static int data_slice(const Take *t, int32_t pos, int32_t len, const char *what, int64_t offset,
                      PyObject **out) {
    *out = NULL;
    if (len < 0) return 0;
    if (pos < 0 || (int64_t)pos + len > t->frame_len - t->data_start)
        return corrupt("message batch entry at offset %lld: %s [%d, +%d) outside the %zd-byte data section",
                       (long long)offset, what, (int)pos, (int)len, t->frame_len - t->data_start);
    *out = PyBytes_FromStringAndSize((const char *)t->frame + t->data_start + pos, len);
    return *out == NULL ? -1 : 0;
}

/* A zig-zag varint at *pos, not past the frame's end; as reader_v2._uvarint_slow, plus a check that it
 * fits 64 bits (Python's ints would carry on into a length no frame can hold). */
static int read_varint(const Take *t, Py_ssize_t *pos, int64_t *out) {
    uint64_t raw = 0;
    for (int i = 0; i < 10; i++) {
        if (*pos >= t->frame_len) return corrupt("headers run past the end of the message batch frame");
        unsigned char b = t->frame[(*pos)++];
        if (i == 9 && b > 1) return corrupt("varint overflows 64 bits");
        raw |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
    }
    return corrupt("varint longer than 10 bytes");
}

/* Twin of list(reader_v2.decode_record_headers(frame, pos)[0]): a new list of (str, bytes | None).
 *
 * The (name, value) tuples are untracked: they are immutable and hold only a str and bytes or None, so
 * the collector would untrack them itself at its first pass (it does so for every tuple of atoms). The
 * list stays tracked: it is the application's to mutate (append anything to it), and there are few of
 * them (one per message that has headers), so leaving it to the collector is the safe choice. */
static PyObject *decode_headers(const Take *t, Py_ssize_t pos) {
    int64_t count, name_len, value_len;
    if (read_varint(t, &pos, &count) < 0) return NULL;
    if (count < 0) {
        corrupt("negative header count %lld", (long long)count);
        return NULL;
    }
    if (count > (t->frame_len - pos) / 2) {  /* each header takes at least two bytes */
        corrupt("header count %lld runs past the end of the message batch frame", (long long)count);
        return NULL;
    }
    /* Appended to, not preallocated: a collection that a tuple's allocation triggers must not find a list
     * with empty slots (a gc callback could hand it to Python code). Header lists are short. */
    PyObject *list = PyList_New(0);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        PyObject *name = NULL, *value = NULL, *pair = NULL;
        if (read_varint(t, &pos, &name_len) < 0) goto fail;
        if (name_len < 0) {
            corrupt("null or negative header key length");
            goto fail;
        }
        if (name_len > t->frame_len - pos) {
            corrupt("header key runs past the end of the message batch frame");
            goto fail;
        }
        name = PyUnicode_DecodeUTF8((const char *)t->frame + pos, (Py_ssize_t)name_len, NULL);
        if (name == NULL) goto fail;  /* UnicodeDecodeError, as bytes.decode() raises */
        pos += (Py_ssize_t)name_len;
        if (read_varint(t, &pos, &value_len) < 0) goto release;
        if (value_len < 0) {
            if (value_len != -1) {
                corrupt("invalid header value length %lld", (long long)value_len);
                goto release;
            }
            value = Py_NewRef(Py_None);
        } else {
            if (value_len > t->frame_len - pos) {
                corrupt("header value runs past the end of the message batch frame");
                goto release;
            }
            value = PyBytes_FromStringAndSize((const char *)t->frame + pos, (Py_ssize_t)value_len);
            if (value == NULL) goto release;
            pos += (Py_ssize_t)value_len;
        }
        pair = PyTuple_Pack(2, name, value);
    release:  /* the pair holds its own references (or was not made) */
        Py_DECREF(name);
        Py_XDECREF(value);
        if (pair == NULL) goto fail;
        PyObject_GC_UnTrack(pair);
        int rc = PyList_Append(list, pair);
        Py_DECREF(pair);
        if (rc < 0) goto fail;
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

/* The Message of a message entry (kind < KIND_ERROR), untracked; NULL on error. */
static PyObject *entry_message(Take *t, const Entry *e) {
    PyObject *key = NULL, *value = NULL, *headers = NULL, *offset = NULL, *msg = NULL;
    if (data_slice(t, e->key_pos, e->key_len, "key", e->offset, &key) < 0) goto done;
    if (data_slice(t, e->value_pos, e->value_len, "value", e->offset, &value) < 0) goto done;
    if (e->headers_pos >= 0) {
        if (e->headers_pos >= t->frame_len - t->data_start) {
            corrupt("message batch entry at offset %lld: headers at %d outside the %zd-byte data section",
                    (long long)e->offset, (int)e->headers_pos, t->frame_len - t->data_start);
            goto done;
        }
        if ((headers = decode_headers(t, t->data_start + e->headers_pos)) == NULL) goto done;
    }
    if ((offset = PyLong_FromLongLong(e->offset)) == NULL) goto done;
    if (t->timestamp == NULL || t->ts_value != e->timestamp || t->ts_kind != e->kind) {
        PyObject *kind = PyLong_FromLong(e->kind), *ts = PyLong_FromLongLong(e->timestamp), *pair = NULL;
        if (kind != NULL && ts != NULL) pair = PyTuple_Pack(2, kind, ts);
        Py_XDECREF(kind);
        Py_XDECREF(ts);
        if (pair == NULL) goto done;
        PyObject_GC_UnTrack(pair);  /* two ints: see "Cycle collector" at the top */
        Py_XSETREF(t->timestamp, pair);
        t->ts_value = e->timestamp;
        t->ts_kind = e->kind;
    }
    if (e->leader_epoch >= 0 && (t->epoch == NULL || t->epoch_value != e->leader_epoch)) {
        PyObject *epoch = PyLong_FromLong(e->leader_epoch);
        if (epoch == NULL) goto done;
        Py_XSETREF(t->epoch, epoch);
        t->epoch_value = e->leader_epoch;
    }
    PyObject *values[M_NSLOTS] = {
        t->topic, t->partition, offset, key, value, headers, NULL, t->timestamp, NULL,
        e->leader_epoch >= 0 ? t->epoch : NULL};
    msg = new_message(values);  /* takes its own references */
    if (msg != NULL) PyObject_GC_UnTrack(msg);  /* see "Cycle collector" at the top */
done:
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(headers);
    Py_XDECREF(offset);
    return msg;
}

/* The Message of an error or EOF event entry: event(topic, partition, offset, kind, code, reason) with
 * reason the error's utf-8 bytes (None for EOF), the same Python helper the Python twin calls. */
static PyObject *event_message(const Take *t, const Entry *e, PyObject *event) {
    PyObject *reason = NULL, *offset = NULL, *kind = NULL, *code = NULL, *msg = NULL;
    if (e->kind != KIND_ERROR) {
        reason = Py_NewRef(Py_None);
    } else if (e->value_len < 0) {  /* the Python twin's slice [p:p-1] is empty */
        reason = PyBytes_FromStringAndSize(NULL, 0);
    } else if (data_slice(t, e->value_pos, e->value_len, "error reason", e->offset, &reason) < 0) {
        return NULL;
    }
    if (reason != NULL && (offset = PyLong_FromLongLong(e->offset)) != NULL &&
        (kind = PyLong_FromLong(e->kind)) != NULL && (code = PyLong_FromLong(e->key_len)) != NULL) {
        PyObject *call_args[6] = {t->topic, t->partition, offset, kind, code, reason};
        msg = PyObject_Vectorcall(event, call_args, 6, NULL);
    }
    Py_XDECREF(reason);
    Py_XDECREF(offset);
    Py_XDECREF(kind);
    Py_XDECREF(code);
    return msg;
}

/* take_entries(frame, start, stop, data_start, topic, partition, event) -> (messages, count, skipped)
 *
 * Twin of consumer_core.packing._take_entries_py (read that for the semantics): entries start .. stop-1
 * of the frame as a list of Messages, how many of them are message entries (prefetch credit), and the
 * (offset, leader epoch) of the last KIND_SKIP entry or None. A malformed frame raises CorruptRecordError
 * (or ValueError for arguments that do not fit the frame) and nothing is read outside it. */
static PyObject *take_entries(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "take_entries() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    if (message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "take_entries(): bind_message() was not called");
        return NULL;
    }
    PyObject *frame = args[0], *event = args[6];
    if (!PyBytes_Check(frame)) {
        PyErr_Format(PyExc_TypeError, "take_entries(): frame must be bytes, not %.100s",
                     Py_TYPE(frame)->tp_name);
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    if (stop == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t data_start = PyLong_AsSsize_t(args[3]);
    if (data_start == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t frame_len = PyBytes_GET_SIZE(frame);
    if (start < 0 || stop < start || data_start < FRAME_COUNT_SIZE || data_start > frame_len ||
        stop > (data_start - FRAME_COUNT_SIZE) / FRAME_ENTRY_SIZE) {
        PyErr_Format(PyExc_ValueError, "take_entries(): entries %zd..%zd with data at %zd do not fit a "
                     "%zd-byte frame", start, stop, data_start, frame_len);
        return NULL;
    }
    Take t = {.frame = (const unsigned char *)PyBytes_AS_STRING(frame), .frame_len = frame_len,
              .data_start = data_start, .topic = args[4], .partition = args[5]};  /* the rest zeroed */
    PyObject *out = PyList_New(0), *skipped = Py_NewRef(Py_None), *count = NULL, *result = NULL;
    Py_ssize_t messages = 0;
    if (out == NULL) goto done;
    for (Py_ssize_t i = start; i < stop; i++) {
        Entry e;
        PyObject *msg;
        read_entry(t.frame + FRAME_COUNT_SIZE + i * FRAME_ENTRY_SIZE, &e);
        if (e.kind < KIND_ERROR) {
            msg = entry_message(&t, &e);
            messages++;
        } else if (e.kind == KIND_SKIP) {
            PyObject *skip = Py_BuildValue("(Li)", (long long)e.offset, (int)e.leader_epoch);
            if (skip == NULL) goto done;
            Py_SETREF(skipped, skip);
            continue;
        } else {
            msg = event_message(&t, &e, event);
        }
        if (msg == NULL) goto done;
        int rc = PyList_Append(out, msg);
        Py_DECREF(msg);
        if (rc < 0) goto done;
    }
    if ((count = PyLong_FromSsize_t(messages)) != NULL) result = PyTuple_Pack(3, out, count, skipped);
done:
    /* Every temporary is released on success and on failure alike. */
    Py_XDECREF(out);
    Py_XDECREF(count);
    Py_DECREF(skipped);
    Py_XDECREF(t.timestamp);
    Py_XDECREF(t.epoch);
    return result;
}

/* ======================================================================================================
 * ProducerCore: the C base of kqactors.producer.Producer, and produce() for the common case
 * ==================================================================================================== */

/* produce() is the app thread's hot path, and at small message sizes the app thread is the producer's
 * bottleneck: the Python body's checks, partition choice and wake logic cost more than the append itself.
 * ProducerCore holds the state produce() reads as members (Producer's __init__ and every other method
 * keep assigning them as plain attributes: self._closed = True, ...) and does the whole common case in
 * C. Anything else — unusual types, headers, bad input, an unknown or held topic, a closed or failed
 * producer, odd arguments — goes, before any side effect, to Producer._produce_py, the Python body that
 * stays the reference, with the very same arguments; so every error, hold and report is its.
 *
 * The one step after a side effect that can still fail is the append itself (the queue is full): by then
 * a partitioner may have run, so instead of calling the reference (which would run it again) the C code
 * does what the reference's last lines do — the same _wait_for_room() call, one more append, the same
 * BufferError. */

#include <time.h>

enum { A_TOPIC, A_VALUE, A_KEY, A_PARTITION, A_ON_DELIVERY, A_CALLBACK, A_TIMESTAMP, A_HEADERS,
       A_BLOCK_TIMEOUT, A_N };
static const char *const produce_arg_names[A_N] = {
    "topic", "value", "key", "partition", "on_delivery", "callback", "timestamp", "headers", "block_timeout"};
static PyObject *produce_arg_strs[A_N];  /* the names above, interned */
static PyObject *str_produce_py, *str_partition_for, *str_hand_over_now, *str_wait_for_room, *str_held,
    *str_is_set, *str_set;

typedef struct {
    PyObject_HEAD
    PyObject *buffers;            /* _buffers: the native ProducerBuffers */
    PyObject *partition_counts;   /* _partition_counts: dict topic -> partition count */
    PyObject *null_sticky;        /* _null_sticky: dict topic -> (partition, expires at wall-clock ms, count) */
    PyObject *checked_cb;         /* _checked_cb: the last callback known to be callable, or None */
    PyObject *fatal;              /* _fatal: the fatal KafkaError, or None */
    PyObject *wake;               /* _wake: the flusher's threading.Event */
    PyObject *unassigned;         /* _unassigned: UnassignedMessages (its .held: topics waiting for metadata) */
    PyObject *partitioner;        /* _partitioner: read by _partition_for (kept with the rest of the state) */
    long long null_sticky_ms;     /* _null_sticky_ms: 0 when null keys are not sticky */
    Py_ssize_t max_payload_bytes; /* _max_payload_bytes */
    Py_ssize_t flush_messages;    /* _flush_messages: unsent messages that wake the flusher early */
    char closed;                  /* _closed */
    char wake_on_first;           /* _wake_on_first: linger.ms=0 */
    char flusher_idle;            /* _flusher_idle: the flusher sleeps until woken */
} ProducerCore;

static int core_traverse(ProducerCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->buffers);
    Py_VISIT(self->partition_counts);
    Py_VISIT(self->null_sticky);
    Py_VISIT(self->checked_cb);
    Py_VISIT(self->fatal);
    Py_VISIT(self->wake);
    Py_VISIT(self->unassigned);
    Py_VISIT(self->partitioner);
    return 0;
}

static int core_clear(ProducerCore *self) {
    Py_CLEAR(self->buffers);
    Py_CLEAR(self->partition_counts);
    Py_CLEAR(self->null_sticky);
    Py_CLEAR(self->checked_cb);
    Py_CLEAR(self->fatal);
    Py_CLEAR(self->wake);
    Py_CLEAR(self->unassigned);
    Py_CLEAR(self->partitioner);
    return 0;
}

static void core_dealloc(ProducerCore *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    core_clear(self);
    type->tp_free((PyObject *)self);
}

/* The wall clock in ms, as the reference's time.time_ns() // 1_000_000; -1 if it cannot be read. */
static long long wall_clock_ms(void) {
    struct timespec ts;
    if (timespec_get(&ts, TIME_UTC) != TIME_UTC) return -1;
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* self._produce_py(*args, **kwargs) with the caller's very arguments (no tuple or dict is built). */
static PyObject *produce_reference(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *small[A_N + 1], **stack = small;
    if (total + 1 > (Py_ssize_t)(sizeof(small) / sizeof(small[0]))) {
        stack = PyMem_New(PyObject *, total + 1);
        if (stack == NULL) return PyErr_NoMemory();
    }
    stack[0] = self;
    if (total) memcpy(stack + 1, args, (size_t)total * sizeof(PyObject *));
    PyObject *res = PyObject_VectorcallMethod(str_produce_py, stack, (size_t)(nargs + 1), kwnames);
    if (stack != small) PyMem_Free(stack);
    return res;
}

static int produce_kw_index(PyObject *name) {
    for (int i = 0; i < A_N; i++)
        if (name == produce_arg_strs[i]) return i;  /* call sites' keywords are interned: the usual hit */
    for (int i = 0; i < A_N; i++)
        if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, produce_arg_names[i]) == 0) return i;
    return -1;
}

/* The partition for a message without an explicit one (a new reference, NULL on error): a null key's
 * cached sticky choice while it is valid, as the reference's _partition_for reads it, else
 * self._partition_for(topic, key, count, now_ms) itself (the partitioner; it refreshes the cache). */
static PyObject *core_choose_partition(ProducerCore *self, PyObject *topic, PyObject *key, PyObject *count_obj,
                                       long long count, long long now_ms) {
    if (key == Py_None && self->null_sticky_ms && self->null_sticky != NULL && PyDict_CheckExact(self->null_sticky)) {
        PyObject *sticky = PyDict_GetItemWithError(self->null_sticky, topic);  /* borrowed */
        if (sticky == NULL && PyErr_Occurred()) return NULL;
        if (sticky != NULL && PyTuple_CheckExact(sticky) && PyTuple_GET_SIZE(sticky) == 3) {
            PyObject *partition = PyTuple_GET_ITEM(sticky, 0), *expires = PyTuple_GET_ITEM(sticky, 1);
            PyObject *sticky_count = PyTuple_GET_ITEM(sticky, 2);
            if (PyLong_CheckExact(partition) && PyLong_CheckExact(expires) && PyLong_CheckExact(sticky_count)) {
                int overflow_e = 0, overflow_c = 0;
                long long expires_ms = PyLong_AsLongLongAndOverflow(expires, &overflow_e);
                long long cached_count = PyLong_AsLongLongAndOverflow(sticky_count, &overflow_c);
                /* (an entry out of long long range is left to _partition_for, which decides the same) */
                if (!overflow_e && !overflow_c && now_ms < expires_ms && cached_count == count) {
                    Py_INCREF(partition);
                    return partition;
                }
            }
        }
    }
    PyObject *now_obj = PyLong_FromLongLong(now_ms);
    if (now_obj == NULL) return NULL;
    Py_INCREF(count_obj);  /* borrowed from _partition_counts, which the call may change */
    PyObject *call_args[5] = {(PyObject *)self, topic, key, count_obj, now_obj};
    PyObject *partition = PyObject_VectorcallMethod(str_partition_for, call_args, 5, NULL);
    Py_DECREF(count_obj);
    Py_DECREF(now_obj);
    return partition;
}

/* Truth of a bool-returning call's result (consumed); -1 on error (also when res is NULL). */
static int consume_truth(PyObject *res) {
    if (res == NULL) return -1;
    int truth = PyObject_IsTrue(res);
    Py_DECREF(res);
    return truth;
}

/* A produce() call the C path takes: its arguments as checked by produce_check(). Borrowed references. */
typedef struct {
    PyObject *topic, *key, *value, *callback;  /* exact str; bytes or None; bytes or None; None or callable */
    PyObject *partition_arg;   /* the caller's partition (explicit) or NULL (the partitioner chooses) */
    PyObject *timestamp_arg;   /* the caller's non-zero timestamp, or NULL (the wall clock) */
    PyObject *block_timeout;   /* as given, or None */
    PyObject *count_obj;       /* the topic's partition count, from _partition_counts */
    long long count, timestamp, now_ms;  /* now_ms: -1 when the clock was not read */
    Py_ssize_t size;
} FastProduce;

/* The reference's checks, in its order, with no side effect but its own (remembering a callable callback).
 * 1: the C path applies (*f is filled); 0: anything else — the reference decides (no error is set). */
static int produce_check(ProducerCore *self, PyObject *const a[A_N], FastProduce *f) {
    int overflow = 0;
    PyObject *topic = a[A_TOPIC];
    if (topic == NULL || !PyUnicode_CheckExact(topic) || PyUnicode_GET_LENGTH(topic) == 0) return 0;
    PyObject *value = a[A_VALUE] ? a[A_VALUE] : Py_None;
    PyObject *key = a[A_KEY] ? a[A_KEY] : Py_None;
    if ((value != Py_None && !PyBytes_CheckExact(value)) || (key != Py_None && !PyBytes_CheckExact(key))) return 0;
    long long partition = -1;
    if (a[A_PARTITION] != NULL) {
        if (!PyLong_CheckExact(a[A_PARTITION])) return 0;
        partition = PyLong_AsLongLongAndOverflow(a[A_PARTITION], &overflow);
        if (overflow) return 0;
    }
    PyObject *cb = a[A_ON_DELIVERY] != NULL && a[A_ON_DELIVERY] != Py_None ? a[A_ON_DELIVERY]
                   : a[A_CALLBACK] != NULL ? a[A_CALLBACK] : Py_None;
    if (cb != Py_None && cb != self->checked_cb) {
        if (!PyCallable_Check(cb)) return 0;
        Py_INCREF(cb);
        Py_XSETREF(self->checked_cb, cb);  /* as the reference does: known callable from now on */
    }
    long long timestamp = 0;
    if (a[A_TIMESTAMP] != NULL) {
        if (!PyLong_CheckExact(a[A_TIMESTAMP])) return 0;
        timestamp = PyLong_AsLongLongAndOverflow(a[A_TIMESTAMP], &overflow);
        if (overflow) return 0;
    }
    if (a[A_HEADERS] != NULL && a[A_HEADERS] != Py_None) return 0;
    /* Closed, failed, or not initialised (NULL members): the reference raises its error. */
    if (self->closed || self->fatal != Py_None || self->buffers == NULL || self->partition_counts == NULL ||
        self->wake == NULL || self->unassigned == NULL || !PyObject_TypeCheck(self->buffers, &BuffersType) ||
        !PyDict_CheckExact(self->partition_counts))
        return 0;
    Py_ssize_t size = (key != Py_None ? PyBytes_GET_SIZE(key) : 0) + (value != Py_None ? PyBytes_GET_SIZE(value) : 0);
    if (size > self->max_payload_bytes) return 0;  /* MSG_SIZE_TOO_LARGE */
    PyObject *held = PyObject_GetAttr(self->unassigned, str_held);
    if (held == NULL) {
        PyErr_Clear();  /* (a failed look-up fails again in the reference, which raises it) */
        return 0;
    }
    int is_held = !PyDict_CheckExact(held) || (PyDict_GET_SIZE(held) > 0 && PyDict_Contains(held, topic) != 0);
    Py_DECREF(held);
    if (is_held) {
        PyErr_Clear();  /* as above, should the look-up have failed */
        return 0;  /* messages wait for this topic's metadata: the reference puts this one behind them */
    }
    /* Borrowed, so read last: no Python code runs between here and its use (core_choose_partition). */
    PyObject *count_obj = PyDict_GetItemWithError(self->partition_counts, topic);
    if (count_obj == NULL) {
        PyErr_Clear();  /* as above */
        return 0;  /* partition count not known yet: the reference holds the message (or reports it) */
    }
    if (!PyLong_CheckExact(count_obj)) return 0;
    long long count = PyLong_AsLongLongAndOverflow(count_obj, &overflow);
    if (overflow) return 0;
    if (partition >= count) return 0;  /* _UNKNOWN_PARTITION */
    f->now_ms = -1;
    if (partition < 0 || timestamp == 0) {
        /* One clock read for the sticky expiry and the timestamp, as in the reference. */
        if ((f->now_ms = wall_clock_ms()) < 0) return 0;
    }
    f->topic = topic;
    f->key = key;
    f->value = value;
    f->callback = cb;
    f->partition_arg = partition < 0 ? NULL : a[A_PARTITION];
    f->timestamp_arg = timestamp != 0 ? a[A_TIMESTAMP] : NULL;
    f->timestamp = timestamp != 0 ? timestamp : f->now_ms;
    f->block_timeout = a[A_BLOCK_TIMEOUT] ? a[A_BLOCK_TIMEOUT] : Py_None;
    f->count_obj = count_obj;
    f->count = count;
    f->size = size;
    return 1;
}

/* Appends a checked message: part_obj, ts_obj and size_obj are the append's arguments. Returns 0, or -1
 * with an error set (BufferError when the queue stays full, as in the reference's tail). */
static int produce_append(ProducerCore *self, PyObject *buffers, const FastProduce *f, PyObject *part_obj,
                          PyObject *ts_obj, PyObject *size_obj) {
    PyObject *append_args[8] = {f->topic, part_obj, f->key, f->value, Py_None, ts_obj, f->callback, size_obj};
    PyObject *res = buffers_append((Buffers *)buffers, append_args, 8, NULL);
    if (res == NULL) return -1;
    int appended = res == Py_True;
    Py_DECREF(res);
    if (appended) return 0;
    /* Queue full: wait for room if block_timeout says so, then try once more (the reference's last lines). */
    PyObject *wait_args[3] = {(PyObject *)self, size_obj, f->block_timeout};
    int room = consume_truth(PyObject_VectorcallMethod(str_wait_for_room, wait_args, 3, NULL));
    if (room < 0) return -1;
    if (room) {
        if ((res = buffers_append((Buffers *)buffers, append_args, 8, NULL)) == NULL) return -1;
        appended = res == Py_True;
        Py_DECREF(res);
        if (appended) return 0;
    }
    PyErr_SetString(PyExc_BufferError, "Local: Queue full");
    return -1;
}

/* After an append: hand the message over at once or wake the flusher, as the reference does. */
static int produce_wake(ProducerCore *self, PyObject *buffers, PyObject *wake, PyObject *topic, PyObject *part_obj) {
    Py_ssize_t unsent = ((Buffers *)buffers)->unsent;
    if (unsent == 1 && self->wake_on_first && self->flusher_idle) {
        PyObject *hand_args[3] = {(PyObject *)self, topic, part_obj};
        int handed = consume_truth(PyObject_VectorcallMethod(str_hand_over_now, hand_args, 3, NULL));
        if (handed != 0) return handed < 0 ? -1 : 0;
    }
    if (unsent >= self->flush_messages || (unsent == 1 && (self->wake_on_first || self->flusher_idle))) {
        int is_set = consume_truth(PyObject_CallMethodNoArgs(wake, str_is_set));
        if (is_set < 0) return -1;
        if (!is_set) {
            PyObject *res = PyObject_CallMethodNoArgs(wake, str_set);
            if (res == NULL) return -1;
            Py_DECREF(res);
        }
    }
    return 0;
}

/* The C path proper, after produce_check(): from here on there are side effects (the partitioner, the
 * append), so nothing goes to the reference any more. */
static PyObject *produce_fast(ProducerCore *self, const FastProduce *f) {
    PyObject *buffers = self->buffers, *wake = self->wake, *part_obj, *ts_obj, *size_obj = NULL;
    int rc = -1;
    Py_INCREF(buffers);  /* the members could be replaced while Python code runs below */
    Py_INCREF(wake);
    if (f->partition_arg != NULL) {
        part_obj = f->partition_arg;
        Py_INCREF(part_obj);
    } else {
        part_obj = core_choose_partition(self, f->topic, f->key, f->count_obj, f->count, f->now_ms);
    }
    if (f->timestamp_arg != NULL) {
        ts_obj = f->timestamp_arg;
        Py_INCREF(ts_obj);
    } else {
        ts_obj = PyLong_FromLongLong(f->timestamp);
    }
    if (part_obj != NULL && ts_obj != NULL && (size_obj = PyLong_FromSsize_t(f->size)) != NULL &&
        produce_append(self, buffers, f, part_obj, ts_obj, size_obj) == 0)
        rc = produce_wake(self, buffers, wake, f->topic, part_obj);
    Py_XDECREF(size_obj);
    Py_XDECREF(ts_obj);
    Py_XDECREF(part_obj);
    Py_DECREF(wake);
    Py_DECREF(buffers);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(core_produce_doc,
"produce($self, /, topic, value=None, key=None, partition=-1, on_delivery=None, callback=None, timestamp=0,\n"
"        headers=None, *, block_timeout=None)\n"
"--\n"
"\n"
"Queue one message; its delivery report is served by poll()/flush().\n"
"\n"
"Raises BufferError when queue.buffering.max.messages/kbytes is reached (after waiting up to\n"
"block_timeout seconds while serving delivery reports, if given), KafkaException for\n"
"MSG_SIZE_TOO_LARGE, _UNKNOWN_PARTITION or a fatal producer state, TypeError for wrong types.\n"
"\n"
"The C twin of Producer._produce_py (kqactors/producer.py), the reference: this does the common case\n"
"(str topic, bytes or None key and value, int partition and timestamp, no headers, a topic whose\n"
"partition count is known) and hands every other call to _produce_py unchanged.");

static PyObject *core_produce(ProducerCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *a[A_N] = {NULL};
    FastProduce f;
    int fast = nargs <= A_BLOCK_TIMEOUT;  /* block_timeout is keyword-only */
    for (Py_ssize_t i = 0; fast && i < nargs; i++) a[i] = args[i];
    for (Py_ssize_t j = 0; fast && kwnames != NULL && j < PyTuple_GET_SIZE(kwnames); j++) {
        int index = produce_kw_index(PyTuple_GET_ITEM(kwnames, j));
        if (index < 0 || a[index] != NULL) fast = 0;  /* unknown or given twice: the reference's TypeError */
        else a[index] = args[nargs + j];
    }
    if (fast && produce_check(self, a, &f)) return produce_fast(self, &f);
    return produce_reference((PyObject *)self, args, nargs, kwnames);
}

static PyMethodDef core_methods[] = {
    {"produce", (PyCFunction)(void (*)(void))core_produce, METH_FASTCALL | METH_KEYWORDS, core_produce_doc},
    {NULL, NULL, 0, NULL},
};

/* The hot state, as attributes of the Python subclass. Objects are T_OBJECT_EX (AttributeError until
 * __init__ assigns them, as for a plain attribute; produce() hands such a half-made producer to the
 * reference); the flags are T_BOOL, so they take True/False only (the Python code assigns nothing else). */
static PyMemberDef core_members[] = {
    {"_buffers", T_OBJECT_EX, offsetof(ProducerCore, buffers), 0, "the partition buffers (ProducerBuffers)"},
    {"_partition_counts", T_OBJECT_EX, offsetof(ProducerCore, partition_counts), 0, "topic -> partition count"},
    {"_null_sticky", T_OBJECT_EX, offsetof(ProducerCore, null_sticky), 0,
     "topic -> (partition, expires at wall-clock ms, partition count): the null-key sticky cache"},
    {"_checked_cb", T_OBJECT_EX, offsetof(ProducerCore, checked_cb), 0, "the last callback known to be callable"},
    {"_fatal", T_OBJECT_EX, offsetof(ProducerCore, fatal), 0, "the fatal KafkaError, or None"},
    {"_wake", T_OBJECT_EX, offsetof(ProducerCore, wake), 0, "the flusher's threading.Event"},
    {"_unassigned", T_OBJECT_EX, offsetof(ProducerCore, unassigned), 0, "messages waiting for their topic's metadata"},
    {"_partitioner", T_OBJECT_EX, offsetof(ProducerCore, partitioner), 0, "the Partitioner"},
    {"_null_sticky_ms", T_LONGLONG, offsetof(ProducerCore, null_sticky_ms), 0,
     "how long a null key's sticky partition is cached (0: not cached)"},
    {"_max_payload_bytes", T_PYSSIZET, offsetof(ProducerCore, max_payload_bytes), 0,
     "largest key + value + headers size accepted"},
    {"_flush_messages", T_PYSSIZET, offsetof(ProducerCore, flush_messages), 0,
     "unsent messages that wake the flusher early"},
    {"_closed", T_BOOL, offsetof(ProducerCore, closed), 0, "close() ran"},
    {"_wake_on_first", T_BOOL, offsetof(ProducerCore, wake_on_first), 0,
     "linger.ms=0: the first unsent message wakes the flusher"},
    {"_flusher_idle", T_BOOL, offsetof(ProducerCore, flusher_idle), 0, "the flusher sleeps until woken"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ProducerCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kqactors._native.ProducerCore",
    .tp_basicsize = sizeof(ProducerCore),
    .tp_dealloc = (destructor)core_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "C base of kqactors.producer.Producer: the state produce() reads as members, and produce() "
              "for the common case (every other case runs Producer._produce_py).",
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_methods = core_methods,
    .tp_members = core_members,
    .tp_new = PyType_GenericNew,
};

/* Readies ProducerCore and its interned names and adds it to the module (called once from PyInit). */
static int producer_core_register(PyObject *m) {
    if (PyType_Ready(&ProducerCoreType) < 0) return -1;
    if (str_produce_py == NULL) {
        for (int i = 0; i < A_N; i++)
            if ((produce_arg_strs[i] = PyUnicode_InternFromString(produce_arg_names[i])) == NULL) return -1;
        if ((str_produce_py = PyUnicode_InternFromString("_produce_py")) == NULL ||
            (str_partition_for = PyUnicode_InternFromString("_partition_for")) == NULL ||
            (str_hand_over_now = PyUnicode_InternFromString("_hand_over_now")) == NULL ||
            (str_wait_for_room = PyUnicode_InternFromString("_wait_for_room")) == NULL ||
            (str_held = PyUnicode_InternFromString("held")) == NULL ||
            (str_is_set = PyUnicode_InternFromString("is_set")) == NULL ||
            (str_set = PyUnicode_InternFromString("set")) == NULL)
            return -1;
    }
    return PyModule_AddObjectRef(m, "ProducerCore", (PyObject *)&ProducerCoreType);
}

/* ======================================================================================================
 * Module
 * ==================================================================================================== */

static PyMethodDef module_methods[] = {
    {"bind_message", (PyCFunction)bind_message, METH_O,
     "bind_message(cls): the Message class complete_ok() builds (must have plain __slots__)."},
    {"track", (PyCFunction)track, METH_O,
     "track(obj): put obj back under the cycle collector if this module left it untracked."},
    {"complete_ok", (PyCFunction)(void (*)(void))complete_ok, METH_FASTCALL,
     "complete_ok(pending, topic, partition, first, count, base_offset, default_cb, now, ready_append, "
     "create_time_type) -> (done, freed)"},
    {"take_entries", (PyCFunction)(void (*)(void))take_entries, METH_FASTCALL,
     "take_entries(frame, start, stop, data_start, topic, partition, event) -> (messages, count, skipped)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kqactors._native",
    .m_doc = "Optional C speed-ups of the producer's and consumer's app-side hot paths (kqactors/native.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

/* A module attribute, kept (a strong reference) for the extension's lifetime. */
static PyObject *import_attr(const char *module, const char *name) {
    PyObject *mod = PyImport_ImportModule(module);
    if (mod == NULL) return NULL;
    PyObject *attr = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    return attr;
}

static int add_type(PyObject *m, const char *name, PyTypeObject *type) {
    Py_INCREF(type);
    if (PyModule_AddObject(m, name, (PyObject *)type) < 0) {  /* steals only on success */
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&PackerType) < 0 || PyType_Ready(&BuffersType) < 0) return NULL;
    if (StructError == NULL && (StructError = import_attr("struct", "error")) == NULL) return NULL;
    if (monotonic == NULL && (monotonic = import_attr("time", "monotonic")) == NULL) return NULL;
    if (str_acquire == NULL) {
        if ((str_acquire = PyUnicode_InternFromString("acquire")) == NULL ||
            (str_release = PyUnicode_InternFromString("release")) == NULL ||
            (str_next_msgid = PyUnicode_InternFromString("next_msgid")) == NULL ||
            (str_packer = PyUnicode_InternFromString("packer")) == NULL ||
            (str_pending = PyUnicode_InternFromString("pending")) == NULL ||
            (str_new_buffer = PyUnicode_InternFromString("_new_buffer")) == NULL)
            return NULL;
    }
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL) return NULL;
    if (add_type(m, "Packer", &PackerType) < 0 || add_type(m, "Buffers", &BuffersType) < 0 ||
        producer_core_register(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
