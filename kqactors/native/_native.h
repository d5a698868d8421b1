/* kqactors/native/_native.h: what the files of the kqactors.native._native extension share.
 *
 * _native.c holds the overview, the Message binding and the module; _native_buffers.c the producer's
 * app-side buffers and delivery reports; _native_produce.c ProducerCore (produce() in C); _native_take.c
 * the consumer's MessageBatch.take() loop. Built as one module (setup.py); only PyInit__native is exported.
 */
#ifndef KQACTORS_NATIVE_H
#define KQACTORS_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

/* ---- _native.c: the Message class that delivery reports and takes build (bind_message()) ---- */

enum { M_TOPIC, M_PARTITION, M_OFFSET, M_KEY, M_VALUE, M_HEADERS, M_ERROR, M_TIMESTAMP, M_LATENCY,
       M_LEADER_EPOCH, M_DELIVERY_COUNT, M_NSLOTS };
extern PyTypeObject *message_type;  /* strong reference, NULL until bind_message() */
/* A new Message; `values` are borrowed, NULL meaning None. Returns a new reference or NULL. */
PyObject *new_message(PyObject *const values[M_NSLOTS]);
/* A module attribute, as a new reference. */
PyObject *import_attr(const char *module, const char *name);
/* PyModule_AddObject for a static type, reference counts handled. */
int add_type(PyObject *m, const char *name, PyTypeObject *type);

/* ---- _native_buffers.c: the producer's app-side buffers and delivery reports ---- */

/* Holds the counters and containers ProducerBuffers' Python methods use (as plain attributes: the
 * members), so append() — once per produce() — reads them without attribute look-ups. The Python
 * subclass (producer_buffers.NativeProducerBuffers) inherits every other method from ProducerBuffers. */
typedef struct {
    PyObject_HEAD
    PyObject *lock;         /* threading.Lock guarding append/take/complete */
    PyObject *partitions;   /* dict (topic, partition) -> PartitionBuffer */
    PyObject *ready;        /* the delivery reports (a ReadyQueue) */
    Py_ssize_t max_messages, max_bytes, count, nbytes, unsent;
    /* The last partition appended to, so that a run of produce() calls to one partition (the sticky
     * partitioner's) skips the (topic, partition) look-up: valid while `partitions` is the dict it came
     * from (a PartitionBuffer is never replaced, nor its packer and pending table). Owned, or NULL. */
    PyObject *last_topic, *last_partition, *last_partitions, *last_buf, *last_packer, *last_pending;
} Buffers;
extern PyTypeObject BuffersType;
PyObject *buffers_append(Buffers *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames);
PyObject *complete_ok(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* For ProducerCore.produce_values: the lock, the locked append (1 appended, 0 no room, -1 error; args as
 * append's first eight) and the enqueue clock. */
int buffers_lock(Buffers *self);
int buffers_unlock(Buffers *self);
int buffers_append_locked(Buffers *self, PyObject *const *args, int reserved, PyObject *now);
PyObject *buffers_now(void);
int buffers_append_run_locked(Buffers *self, PyObject *topic, PyObject *partition, PyObject *values,
                              Py_ssize_t start, Py_ssize_t stop, PyObject *headers, Py_ssize_t hsize,
                              Py_ssize_t max_payload, PyObject *timestamp, PyObject *callback, PyObject *now,
                              Py_ssize_t *appended);
/* Readies Packer and Buffers and adds them to the module. */
int producer_buffers_register(PyObject *m);

/* ---- _native_produce.c: ProducerCore ---- */

int producer_core_register(PyObject *m);

/* ---- _native_take.c: the consumer's take ---- */

PyObject *take_entries(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif
