/* kqactors.native._native: optional C speed-ups of the app-side per-message work of the producer and consumer.
 *
 * Runs in: the app process (toppar hosts load it with consumer_core.packing but call nothing here).
 * Everything here has a pure-Python twin that stays the reference (DESIGN.md §3 rule 6); kqactors/native/__init__.py
 * picks this module when it imports and KQACTORS_NATIVE is not "0", and the unit tests run both and compare
 * them (byte for byte, Message for Message).
 *
 * Files (they share kqactors/native/_native.h):
 *   _native_buffers.c
 *     Packer         twin of producer_core.packing.PyMessagePacker: appends messages to one growing
 *                    buffer in the layout of kqactors/records/packed.py (the toppar reads it), and with
 *                    append_pending() also records the message's pending entry in the same call.
 *     Buffers        C base of producer_buffers.NativeProducerBuffers: its counters as C members and
 *                    append() (once per produce(): limits, msgid, packing, pending entry) in one call.
 *     complete_ok()  twin of producer_buffers._complete_ok_py: the delivery-report loop of a successful
 *                    CreateTime batch — pops pending entries and builds Message objects.
 *   _native_produce.c
 *     ProducerCore   C base of producer.Producer: the state produce() reads as members, and produce()
 *                    itself for the common case (str topic, bytes/None key and value, no headers, known
 *                    partition count); every other call goes, before any side effect, to
 *                    Producer._produce_py, the Python body, which stays the reference.
 *   _native_take.c
 *     take_entries() twin of consumer_core.packing._take_entries_py: the per-entry loop of
 *                    MessageBatch.take(), turning a fetched-messages frame's entries into Message objects
 *                    (error and EOF events, rare, through the same Python helper the twin calls).
 *   _native.c (this file)
 *     bind_message() tells the module which class is kqactors.message.Message and where its slots live.
 *     track()        puts an object left untracked (below) back under the cycle collector.
 *                    And the module itself.
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
 */

#include "_native.h"

/* ======================================================================================================
 * Message binding
 * ==================================================================================================== */

/* kqactors.message.Message and the byte offsets of its slots, set by bind_message(). Message instances
 * are built by allocating one and storing into its slots directly, skipping the Python __init__ frame;
 * the stored values are exactly what Message.__init__ would store. */
static const char *const message_slot_names[M_NSLOTS] = {
    "_topic", "_partition", "_offset", "_key", "_value", "_headers", "_error", "_timestamp", "_latency",
    "_leader_epoch", "_delivery_count"};
PyTypeObject *message_type = NULL;  /* strong reference */
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

PyObject *new_message(PyObject *const values[M_NSLOTS]) {
    PyObject *msg = message_type->tp_alloc(message_type, 0);  /* zeroed slots */
    if (msg == NULL) return NULL;
    for (int i = 0; i < M_NSLOTS; i++) {
        PyObject *v = values[i] ? values[i] : Py_None;
        Py_INCREF(v);
        *(PyObject **)((char *)msg + message_offsets[i]) = v;
    }
    return msg;
}

/* track(obj): put an object this module left untracked back under the cycle collector. Message setters
 * call it before storing an arbitrary object, so a cycle through a delivery report stays collectable. */
static PyObject *track(PyObject *Py_UNUSED(module), PyObject *obj) {
    if (PyObject_IS_GC(obj) && !PyObject_GC_IsTracked(obj)) PyObject_GC_Track(obj);
    Py_RETURN_NONE;
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
    .m_name = "kqactors.native._native",
    .m_doc = "Optional C speed-ups of the producer's and consumer's app-side hot paths (kqactors/native/__init__.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

/* A module attribute, kept (a strong reference) for the extension's lifetime. */
PyObject *import_attr(const char *module, const char *name) {
    PyObject *mod = PyImport_ImportModule(module);
    if (mod == NULL) return NULL;
    PyObject *attr = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    return attr;
}

int add_type(PyObject *m, const char *name, PyTypeObject *type) {
    Py_INCREF(type);
    if (PyModule_AddObject(m, name, (PyObject *)type) < 0) {  /* steals only on success */
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL) return NULL;
    if (producer_buffers_register(m) < 0 || producer_core_register(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
