/* kqactors/native/_native_produce.c: ProducerCore, the C base of kqactors.client.producer.producer.Producer, and produce().
 *
 * Part of kqactors.native._native (overview and thread safety: _native.c). The Python body,
 * Producer._produce_py, stays the reference and runs every call this file does not do itself.
 */

#include "_native.h"

/* ======================================================================================================
 * ProducerCore: the C base of kqactors.client.producer.producer.Producer, and produce() for the common case
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
    Py_ssize_t flush_messages;    /* _flush_messages: unsent messages that produce() hands over itself */
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

/* After an append: hand over from this thread (the first message with linger.ms=0, or a backlog of
 * flush_messages) or wake the flusher, as the reference does. */
static int produce_wake(ProducerCore *self, PyObject *buffers, PyObject *wake, PyObject *topic, PyObject *part_obj) {
    Py_ssize_t unsent = ((Buffers *)buffers)->unsent;
    if ((unsent == 1 && self->wake_on_first && self->flusher_idle) || unsent >= self->flush_messages) {
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
"The C twin of Producer._produce_py (kqactors/client/producer/producer.py), the reference: this does the common case\n"
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

/* ---- produce_values(): many values of one topic in one call (the ingest daemon's lines) ---- */

static PyObject *header_max_overhead;  /* kqactors.records.packed.HEADER_MAX_OVERHEAD, read on first use */

/* The size produce() counts for these headers (names in characters, as the reference's len(name)), or -1
 * when they are not a list of (str, bytes or None) tuples (the reference decides about those). */
static Py_ssize_t headers_size(PyObject *headers) {
    if (!PyList_CheckExact(headers)) return -1;
    if (header_max_overhead == NULL &&
        (header_max_overhead = import_attr("kqactors.records.packed", "HEADER_MAX_OVERHEAD")) == NULL) {
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t overhead = PyLong_AsSsize_t(header_max_overhead), size = 0;
    if (overhead < 0) {
        PyErr_Clear();
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(headers); i++) {
        PyObject *item = PyList_GET_ITEM(headers, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) return -1;
        PyObject *name = PyTuple_GET_ITEM(item, 0), *hval = PyTuple_GET_ITEM(item, 1);
        if (!PyUnicode_CheckExact(name) || (hval != Py_None && !PyBytes_CheckExact(hval))) return -1;
        size += PyUnicode_GET_LENGTH(name) + (hval != Py_None ? PyBytes_GET_SIZE(hval) : 0) + overhead;
    }
    return size;
}

PyDoc_STRVAR(core_produce_values_doc,
"produce_values($self, /, topic, values, start=0, keys=None, headers=None, on_delivery=None)\n"
"--\n"
"\n"
"Queue values[start:] (with keys[i] if keys is given, and the same headers on each) as produce() would, one\n"
"by one, in one call; returns the index of the first value not queued (len(values) when all were).\n"
"It stops before a value it does not take: the queue is full, or anything produce() would refuse or treat\n"
"in an unusual way (a bad type, a message too large, a topic without a known partition count, a closed or\n"
"failed producer); produce() that one value to get its outcome (BufferError, KafkaException, ...), then\n"
"call again from the next. The C twin of Producer._produce_values_py.");

static PyObject *core_produce_values(ProducerCore *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"topic", "values", "start", "keys", "headers", "on_delivery", NULL};
    PyObject *topic, *values, *keys = Py_None, *headers = Py_None, *cb = Py_None;
    Py_ssize_t start = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|nOOO:produce_values", kwlist, &topic, &values, &start, &keys,
                                     &headers, &cb))
        return NULL;
    if (!PyList_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "produce_values(): values must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_ValueError, "produce_values(): start out of range");
        return NULL;
    }
    if (keys != Py_None && (!PyList_Check(keys) || PyList_GET_SIZE(keys) < n)) {
        PyErr_SetString(PyExc_TypeError, "produce_values(): keys must be None or a list as long as values");
        return NULL;
    }
    /* Anything the loop below does not do itself: the caller's produce() of values[start] decides. */
    Py_ssize_t hsize = 0;
    if (headers != Py_None) {
        if ((hsize = headers_size(headers)) < 0) return PyLong_FromSsize_t(start);
        if (PyList_GET_SIZE(headers) == 0) headers = Py_None;  /* as the reference's _normalise_headers */
    }
    if (start == n || !PyUnicode_CheckExact(topic) || PyUnicode_GET_LENGTH(topic) == 0 ||
        (cb != Py_None && !PyCallable_Check(cb)))
        return PyLong_FromSsize_t(start);
    if (self->closed || self->fatal != Py_None || self->buffers == NULL || self->partition_counts == NULL ||
        self->wake == NULL || self->unassigned == NULL || !PyObject_TypeCheck(self->buffers, &BuffersType) ||
        !PyDict_CheckExact(self->partition_counts))
        return PyLong_FromSsize_t(start);
    PyObject *held = PyObject_GetAttr(self->unassigned, str_held);
    if (held == NULL) {
        PyErr_Clear();
        return PyLong_FromSsize_t(start);
    }
    int is_held = !PyDict_CheckExact(held) || (PyDict_GET_SIZE(held) > 0 && PyDict_Contains(held, topic) != 0);
    Py_DECREF(held);
    PyErr_Clear();
    PyObject *count_obj = is_held ? NULL : PyDict_GetItemWithError(self->partition_counts, topic);
    int overflow = 0;
    long long count = count_obj != NULL && PyLong_CheckExact(count_obj) ?
        PyLong_AsLongLongAndOverflow(count_obj, &overflow) : -1;
    PyErr_Clear();
    long long now_ms = wall_clock_ms();
    if (count <= 0 || overflow || now_ms < 0) return PyLong_FromSsize_t(start);

    /* From here on there are side effects. One clock read for the whole call (timestamps, the sticky
     * choice), as produce() reads it once per message; the values' messages share one enqueue time. */
    Buffers *buffers = (Buffers *)self->buffers;
    PyObject *wake = self->wake, *null_part = NULL, *last_part = NULL, *ts_obj = NULL, *now = NULL;
    Py_INCREF(buffers);
    Py_INCREF(wake);
    Py_INCREF(count_obj);  /* the partitioner (Python) may change _partition_counts */
    Py_ssize_t i = start;
    int locked = 0, failed = 1;
    if ((ts_obj = PyLong_FromLongLong(now_ms)) == NULL || (now = buffers_now()) == NULL) goto done;
    if (buffers_lock(buffers) < 0) goto done;
    locked = 1;
    if (keys == Py_None) {
        /* Null keys (the ingest daemon's lines): one partition for the call, so one run. */
        if ((null_part = core_choose_partition(self, topic, Py_None, count_obj, count, now_ms)) == NULL) goto done;
        Py_ssize_t appended = 0;
        int rc = buffers_append_run_locked(buffers, topic, null_part, values, i, n, headers, hsize,
                                           self->max_payload_bytes, ts_obj, cb, now, &appended);
        i += appended;
        if (appended) {
            Py_INCREF(null_part);
            last_part = null_part;
        }
        if (rc < 0) goto done;
        n = i;  /* the loop below has nothing left: it stopped where the run did */
    }
    for (; i < n; i++) {
        PyObject *value = PyList_GET_ITEM(values, i);
        PyObject *key = keys == Py_None ? Py_None : PyList_GET_ITEM(keys, i);
        if ((value != Py_None && !PyBytes_CheckExact(value)) || (key != Py_None && !PyBytes_CheckExact(key))) break;
        Py_ssize_t size = hsize + (value != Py_None ? PyBytes_GET_SIZE(value) : 0) +
                          (key != Py_None ? PyBytes_GET_SIZE(key) : 0);
        if (size > self->max_payload_bytes) break;
        PyObject *part;
        if (key == Py_None) {
            if (null_part == NULL &&
                (null_part = core_choose_partition(self, topic, Py_None, count_obj, count, now_ms)) == NULL)
                goto done;
            part = null_part;
            Py_INCREF(part);
        } else {
            Py_INCREF(key);  /* values and keys are the caller's lists: Python code may run below */
            Py_INCREF(value);
            part = core_choose_partition(self, topic, key, count_obj, count, now_ms);
            Py_DECREF(key);
            Py_DECREF(value);
            if (part == NULL) goto done;
            if (i >= PyList_GET_SIZE(values) || PyList_GET_ITEM(values, i) != value ||
                (keys != Py_None && (i >= PyList_GET_SIZE(keys) || PyList_GET_ITEM(keys, i) != key))) {
                Py_DECREF(part);  /* the lists changed under us: stop here, the caller goes on */
                break;
            }
        }
        PyObject *size_obj = PyLong_FromSsize_t(size);
        if (size_obj == NULL) {
            Py_DECREF(part);
            goto done;
        }
        PyObject *append_args[8] = {topic, part, key, value, headers, ts_obj, cb, size_obj};
        int rc = buffers_append_locked(buffers, append_args, 0, now);
        Py_DECREF(size_obj);
        if (rc <= 0) {
            Py_DECREF(part);
            if (rc < 0) goto done;
            break;  /* the queue is full */
        }
        Py_XSETREF(last_part, part);
    }
    failed = 0;
done:
    if (locked && buffers_unlock(buffers) < 0) failed = 1;
    if (!failed && last_part != NULL && produce_wake(self, (PyObject *)buffers, wake, topic, last_part) < 0)
        failed = 1;
    Py_XDECREF(last_part);
    Py_XDECREF(null_part);
    Py_XDECREF(ts_obj);
    Py_XDECREF(now);
    Py_DECREF(count_obj);
    Py_DECREF(wake);
    Py_DECREF(buffers);
    if (failed) return NULL;
    return PyLong_FromSsize_t(i);
}

static PyMethodDef core_methods[] = {
    {"produce", (PyCFunction)(void (*)(void))core_produce, METH_FASTCALL | METH_KEYWORDS, core_produce_doc},
    {"produce_values", (PyCFunction)(void (*)(void))core_produce_values, METH_VARARGS | METH_KEYWORDS,
     core_produce_values_doc},
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
     "unsent messages that produce() hands over itself"},
    {"_closed", T_BOOL, offsetof(ProducerCore, closed), 0, "close() ran"},
    {"_wake_on_first", T_BOOL, offsetof(ProducerCore, wake_on_first), 0,
     "linger.ms=0: the first unsent message wakes the flusher"},
    {"_flusher_idle", T_BOOL, offsetof(ProducerCore, flusher_idle), 0, "the flusher sleeps until woken"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ProducerCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kqactors.native._native.ProducerCore",
    .tp_basicsize = sizeof(ProducerCore),
    .tp_dealloc = (destructor)core_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "C base of kqactors.client.producer.producer.Producer: the state produce() reads as members, and produce() "
              "for the common case (every other case runs Producer._produce_py).",
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_methods = core_methods,
    .tp_members = core_members,
    .tp_new = PyType_GenericNew,
};

/* Readies ProducerCore and its interned names and adds it to the module (called once from PyInit). */
int producer_core_register(PyObject *m) {
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
