/* kqactors/native/_native_take.c: the consumer's MessageBatch.take() per-entry loop.
 *
 * Part of kqactors.native._native (overview and cycle-collector rule: _native.c); twin of
 * consumer_core.packing._take_entries_py.
 */

#include "_native.h"

/* ======================================================================================================
 * Consumer: taking entries of a fetched-messages frame
 * ==================================================================================================== */

/* Frame layout of kqactors/core/consumer/packing.py (read its docstring): uint32 count, then count
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
PyObject *take_entries(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "take_entries() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    if (message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "take_entries(): bind_message() was not called");
        return NULL;
    }
    PyObject *event = args[6];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    if (stop == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t data_start = PyLong_AsSsize_t(args[3]);
    if (data_start == -1 && PyErr_Occurred()) return NULL;
    /* Any contiguous bytes-like frame: the app hands over the transport's zero-copy view as it arrived. The
     * buffer stays exported (so it cannot be resized or released) until this call returns; every value is
     * copied out into its own bytes object, so no Message refers to the frame afterwards. */
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "take_entries(): frame must be a bytes-like object, not %.100s",
                     Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    Py_ssize_t frame_len = view.len;
    if (start < 0 || stop < start || data_start < FRAME_COUNT_SIZE || data_start > frame_len ||
        stop > (data_start - FRAME_COUNT_SIZE) / FRAME_ENTRY_SIZE) {
        PyErr_Format(PyExc_ValueError, "take_entries(): entries %zd..%zd with data at %zd do not fit a "
                     "%zd-byte frame", start, stop, data_start, frame_len);
        PyBuffer_Release(&view);
        return NULL;
    }
    Take t = {.frame = (const unsigned char *)view.buf, .frame_len = frame_len,
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
    PyBuffer_Release(&view);
    return result;
}
