/* kqactors.native._native_records: optional C twins of the record codec's per-record loops.
 *
 * Runs in: toppar hosts, where fetched batches are indexed for the consumer and produced messages are
 * encoded (DESIGN.md §3 rule 3). Both functions have a pure-Python reference that stays the specification
 * (DESIGN.md §3 rule 6): kqactors/native/__init__.py picks this module when it imports and KQACTORS_NATIVE is not
 * "0", and tests/unit/records/test_native_records.py compares the two byte for byte, on valid and on
 * malformed input.
 *
 *   pack_v2_records()  twin of records/reader_v2.pack_v2_records: walks the records of a (decompressed)
 *                      RecordBatch v2 section and appends one consumer index entry per record (layout in
 *                      consumer_core/packing.py). In Python this loop is most of a toppar host's CPU when
 *                      consuming small messages.
 *   append_packed()    twin of records/batch_v2.RecordBatchBuilder.append_packed_py: encodes the messages
 *                      of a packed PRODUCE frame (layout in records/packed.py) as v2 records, copying each
 *                      key and value once instead of three times.
 *
 * The fetched bytes are untrusted: every read is bounded by the end of the current record (or section,
 * or packed range), lengths are checked against what is left before they are used, and zig-zag values
 * are decoded with unsigned arithmetic (no signed shift or signed overflow anywhere). The two functions
 * accept exactly the inputs their Python twins accept and raise the same exception types otherwise:
 * CorruptRecordError for a malformed section, ValueError for a malformed packed frame.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

typedef unsigned char byte;

/* Consumer index entry, struct "<qqiiiiiBi": offset, timestamp, key_pos, key_len, value_pos, value_len,
 * headers_pos, kind (the timestamp type), leader_epoch. */
#define INDEX_ENTRY_FORMAT "<qqiiiiiBi"
#define INDEX_ENTRY_SIZE 41
/* The smallest v2 record: length, attributes, timestamp delta, offset delta, key length, value length and
 * header count take one byte each. It bounds how many entries a section can yield. */
#define MIN_RECORD_SIZE 7
/* Packed PRODUCE frame: entry "<qiiH" (timestamp, key_len, value_len, header_count), header "<Hi". */
#define PACKED_ENTRY_SIZE 18
#define PACKED_HEADER_SIZE 6

/* ---- integers ---------------------------------------------------------------------------------------- */

/* The int64 with these two's complement bits, without an implementation-defined conversion. */
static inline int64_t as_int64(uint64_t u) {
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : (int64_t)(u - (uint64_t)INT64_MAX - 1) + INT64_MIN;
}

static inline int32_t as_int32(uint32_t u) {
    return u <= (uint32_t)INT32_MAX ? (int32_t)u : (int32_t)(u - (uint32_t)INT32_MAX - 1) + INT32_MIN;
}

static inline int64_t unzigzag(uint64_t raw) {
    return as_int64((raw >> 1) ^ (0 - (raw & 1)));
}

static inline uint64_t zigzag(int64_t value) {
    uint64_t u = (uint64_t)value;
    return (u << 1) ^ (0 - (u >> 63));
}

/* *sum = a + b, or 0 (and *sum untouched) when the true sum is outside int64. */
static inline int add_int64(int64_t a, int64_t b, int64_t *sum) {
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return 0;
    *sum = a + b;
    return 1;
}

/* *diff = a - b, or 0 when the true difference is outside int64. */
static inline int sub_int64(int64_t a, int64_t b, int64_t *diff) {
    if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b)) return 0;
    *diff = a - b;
    return 1;
}

static inline uint64_t get_le(const byte *p, int size) {
    uint64_t v = 0;
    for (int i = size - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline void put_le(byte *p, uint64_t v, int size) {
    for (int i = 0; i < size; i++) p[i] = (byte)(v >> (8 * i));
}

/* ---- errors ------------------------------------------------------------------------------------------ */

/* kqactors.records.errors.CorruptRecordError. Imported on first use, not at module init: importing
 * kqactors.records runs kqactors.native, which imports this module, so an import at init re-enters it. */
static PyObject *corrupt_record_error;

/* Sets CorruptRecordError(message) and returns -1. */
static int corrupt(const char *format, ...) {
    if (corrupt_record_error == NULL) {
        PyObject *errors = PyImport_ImportModule("kqactors.records.errors");
        if (errors == NULL) return -1;
        corrupt_record_error = PyObject_GetAttrString(errors, "CorruptRecordError");
        Py_DECREF(errors);
        if (corrupt_record_error == NULL) return -1;
    }
    va_list args;
    va_start(args, format);
    PyErr_FormatV(corrupt_record_error, format, args);
    va_end(args);
    return -1;
}

/* ======================================================================================================
 * pack_v2_records: reading
 * ==================================================================================================== */

/* The raw (not zig-zag decoded) varint at *p, which must end before limit; advances *p. As in
 * reader_v2._uvarint_slow the value must fit in 64 bits: at most 10 bytes, the 10th being 0 or 1.
 * ``what`` names the field in the error. Returns 0, or -1 with CorruptRecordError set. */
static int read_uvarint_slow(const byte **p, const byte *limit, uint64_t *out, const char *what) {
    const byte *q = *p;
    uint64_t value = 0;
    *out = 0;  /* defined even on error */
    for (int shift = 0;; shift += 7) {
        if (q >= limit) return corrupt("%s runs past the end of its record", what);
        byte b = *q++;
        if (shift == 63 && b > 1)
            return corrupt(b & 0x80 ? "%s: varint longer than 10 bytes" : "%s: varint does not fit in 64 bits",
                           what);
        value |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) break;
    }
    *out = value;
    *p = q;
    return 0;
}

static inline int read_uvarint(const byte **p, const byte *limit, uint64_t *out, const char *what) {
    if (*p < limit && **p < 0x80) {
        *out = *(*p)++;
        return 0;
    }
    return read_uvarint_slow(p, limit, out, what);
}

/* Whether s[0:len] is strict utf-8, as bytes.decode() checks header names in the Python twin; -1 if the
 * check itself failed (no memory). */
static int is_utf8(const byte *s, Py_ssize_t len) {
    Py_ssize_t i = 0;
    while (i < len && s[i] < 0x80) i++;
    if (i == len) return 1;
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s, len, "strict");
    if (text != NULL) {
        Py_DECREF(text);
        return 1;
    }
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
    PyErr_Clear();
    return 0;
}

/* Steps *p over a record's headers (varint count, then name and value per header), with the checks of
 * reader_v2.decode_record_headers. Returns 0, or -1 with CorruptRecordError (or MemoryError) set. */
static int skip_headers(const byte **p, const byte *limit) {
    uint64_t raw;
    if (read_uvarint(p, limit, &raw, "header count") < 0) return -1;
    int64_t count = unzigzag(raw);
    if (count < 0) return corrupt("negative header count %lld", (long long)count);
    /* A huge count ends quickly: every header takes at least two bytes of a bounded record. */
    for (int64_t i = 0; i < count; i++) {
        if (read_uvarint(p, limit, &raw, "header key length") < 0) return -1;
        int64_t name_len = unzigzag(raw);
        if (name_len < 0) return corrupt("null or negative header key length");
        if (name_len > limit - *p) return corrupt("header key runs past the end of its record");
        int utf8 = is_utf8(*p, (Py_ssize_t)name_len);
        if (utf8 < 0) return -1;
        if (!utf8) return corrupt("header key is not valid utf-8");
        *p += name_len;
        if (read_uvarint(p, limit, &raw, "header value length") < 0) return -1;
        int64_t value_len = unzigzag(raw);
        if (value_len < -1) return corrupt("invalid header value length %lld", (long long)value_len);
        if (value_len > limit - *p) return corrupt("header value runs past the end of its record");
        if (value_len > 0) *p += value_len;
    }
    return 0;
}

/* A key or value: a single byte 1 (varint -1) is null, anything else a non-negative varint length and
 * the bytes, exactly as the Python twin reads them (a longer encoding of -1 is an error there too).
 * *pos is -1 for null, else the field's position from base. Returns 0 or -1 with the error set. */
static int read_field(const byte **p, const byte *limit, const byte *base, int64_t *pos, int64_t *len,
                      const char *what) {
    if (*p < limit && **p == 1) {
        (*p)++;
        *pos = *len = -1;
        return 0;
    }
    uint64_t raw;
    if (read_uvarint(p, limit, &raw, what) < 0) return -1;
    if (raw & 1) return corrupt("invalid negative %s", what);
    uint64_t n = raw >> 1;
    if (n > (uint64_t)(limit - *p)) return corrupt("%s runs past the end of its record", what);
    *pos = *p - base;
    *len = (int64_t)n;
    *p += n;
    return 0;
}

/* An index field that holds a position in the section (-1: none) shifted by delta, or a length. Returns 0
 * when it does not fit in int32 (the Python twin's struct.pack fails there). */
static int index_field(int64_t value, int64_t delta, int32_t *out) {
    if (value < 0) {
        *out = -1;
        return 1;
    }
    if (!add_int64(value, delta, &value) || value < INT32_MIN || value > INT32_MAX) return 0;
    *out = (int32_t)value;
    return 1;
}

typedef struct {
    int64_t delta;             /* added to positions in the section: they become positions in the frame */
    int64_t base_offset;
    int64_t base_timestamp;
    int64_t fixed_timestamp;   /* >= 0: LogAppendTime, every record has this timestamp */
    int64_t min_offset;
    int32_t leader_epoch;
    byte timestamp_type;
} PackArgs;

/* One record at *p (section end ``end``): checks it, and when its offset is >= min_offset writes its
 * index entry at ``entry`` and sets *packed and *offset. Returns 0, or -1 with the error set. */
static int pack_record(const byte **p, const byte *end, const byte *base, const PackArgs *a, byte *entry,
                       int *packed, int64_t *offset) {
    uint64_t raw;
    *packed = 0;
    if (read_uvarint(p, end, &raw, "record length") < 0) return -1;
    int64_t length = unzigzag(raw);
    if (length <= 0 || length > end - *p) return corrupt("record length out of bounds");
    const byte *limit = *p + length;
    (*p)++;  /* record attributes: unused */
    if (read_uvarint(p, limit, &raw, "timestamp delta") < 0) return -1;
    int64_t timestamp_delta = unzigzag(raw);
    if (read_uvarint(p, limit, &raw, "offset delta") < 0) return -1;
    int64_t offset_delta = unzigzag(raw);
    int64_t key_pos, key_len, value_pos, value_len, headers_pos = -1;
    if (read_field(p, limit, base, &key_pos, &key_len, "key length") < 0) return -1;
    if (read_field(p, limit, base, &value_pos, &value_len, "value length") < 0) return -1;
    if (*p >= limit) return corrupt("header count runs past the end of its record");
    if (**p == 0) {
        (*p)++;
    } else {
        headers_pos = *p - base;
        if (skip_headers(p, limit) < 0) return -1;
    }
    if (*p != limit) return corrupt("record length does not match its fields");

    if (!add_int64(a->base_offset, offset_delta, offset)) {
        if (offset_delta < 0) return 0;  /* below any min_offset: skipped, as in Python */
        return corrupt("record offset overflows int64");
    }
    if (*offset < a->min_offset) return 0;
    int64_t timestamp = a->fixed_timestamp;
    if (timestamp < 0 && !add_int64(a->base_timestamp, timestamp_delta, &timestamp))
        return corrupt("record timestamp overflows int64");
    int32_t fields[5];
    if (!index_field(key_pos, a->delta, &fields[0]) || !index_field(key_len, 0, &fields[1]) ||
        !index_field(value_pos, a->delta, &fields[2]) || !index_field(value_len, 0, &fields[3]) ||
        !index_field(headers_pos, a->delta, &fields[4]))
        return corrupt("record position does not fit in the index");
    put_le(entry, (uint64_t)*offset, 8);
    put_le(entry + 8, (uint64_t)timestamp, 8);
    for (int i = 0; i < 5; i++) put_le(entry + 16 + 4 * i, (uint32_t)fields[i], 4);
    entry[36] = a->timestamp_type;
    put_le(entry + 37, (uint32_t)a->leader_epoch, 4);
    *packed = 1;
    return 0;
}

static PyObject *pack_v2_records(PyObject *module, PyObject *args) {
    PyObject *index;
    Py_buffer data;
    Py_ssize_t pos, end;
    long long count, delta, base_offset, base_timestamp, fixed_timestamp, min_offset;
    unsigned char timestamp_type;
    int leader_epoch;
    if (!PyArg_ParseTuple(args, "O!y*nnLLLLLbiL:pack_v2_records", &PyByteArray_Type, &index, &data, &pos,
                          &end, &count, &delta, &base_offset, &base_timestamp, &fixed_timestamp,
                          &timestamp_type, &leader_epoch, &min_offset))
        return NULL;
    PyObject *result = NULL;
    if (pos < 0 || pos > end || end > data.len) {
        PyErr_Format(PyExc_ValueError, "records range %zd..%zd is not inside a buffer of %zd bytes", pos, end,
                     data.len);
        goto done;
    }
    const PackArgs a = {delta, base_offset, base_timestamp, fixed_timestamp, min_offset, leader_epoch,
                        timestamp_type};
    /* Room for every entry the section can yield, so the loop never reallocates; trimmed below. */
    Py_ssize_t mark = PyByteArray_GET_SIZE(index);
    Py_ssize_t room = (end - pos) / MIN_RECORD_SIZE;
    if (count < room) room = count < 0 ? 0 : (Py_ssize_t)count;
    if (room > (PY_SSIZE_T_MAX - mark) / INDEX_ENTRY_SIZE) {
        PyErr_NoMemory();
        goto done;
    }
    if (PyByteArray_Resize(index, mark + room * INDEX_ENTRY_SIZE) < 0) goto done;
    byte *entries = (byte *)PyByteArray_AS_STRING(index) + mark;
    const byte *base = data.buf, *p = base + pos, *stop = base + end;
    Py_ssize_t added = 0;
    int64_t last = -1;
    int failed = 0;
    for (long long seen = 0; seen < count; seen++) {
        if (p >= stop) {
            failed = corrupt("batch declares %lld records but holds only %lld", count, seen);
            break;
        }
        int packed;
        int64_t offset;
        /* The entry slot is inside the room: pack_record writes it only for a complete record, and then
         * added + 1 <= seen + 1 <= count and (added + 1) * MIN_RECORD_SIZE <= bytes walked <= end - pos. */
        if (pack_record(&p, stop, base, &a, entries + added * INDEX_ENTRY_SIZE, &packed, &offset) < 0) {
            failed = -1;
            break;
        }
        if (packed) {
            added++;
            last = offset;
        }
    }
    if (!failed && p != stop) failed = corrupt("%zd unexpected bytes after the last record", stop - p);
    /* Keep the entries of the records before a bad one, as the Python loop does (the caller drops them). */
    if (PyByteArray_Resize(index, mark + added * INDEX_ENTRY_SIZE) < 0) {
        /* Shrinking failed: the unused room stays; zero it rather than leave uninitialised bytes. */
        memset(entries + added * INDEX_ENTRY_SIZE, 0, (size_t)((room - added) * INDEX_ENTRY_SIZE));
        goto done;
    }
    if (!failed) result = Py_BuildValue("nL", added, (long long)last);
done:
    PyBuffer_Release(&data);
    return result;
}

/* ======================================================================================================
 * append_packed: writing
 * ==================================================================================================== */

/* Where encoded bytes go: ``out`` is NULL on the first pass, which only measures (and validates), so the
 * builder's bytearray grows once, to the exact size, and is left untouched by a malformed frame. */
typedef struct {
    byte *out;
    Py_ssize_t size;
} Sink;

static inline void emit(Sink *s, const byte *src, Py_ssize_t n) {
    if (s->out != NULL && n > 0) memcpy(s->out + s->size, src, (size_t)n);
    s->size += n;
}

static inline void emit_byte(Sink *s, byte b) {
    if (s->out != NULL) s->out[s->size] = b;
    s->size++;
}

static inline int varint_size(int64_t value) {
    uint64_t u = zigzag(value);
    int n = 1;
    while (u > 0x7F) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline void emit_varint(Sink *s, int64_t value) {
    uint64_t u = zigzag(value);
    if (s->out == NULL) {
        s->size += varint_size(value);
        return;
    }
    byte *o = s->out + s->size;
    while (u > 0x7F) {
        *o++ = (byte)(u | 0x80);
        u >>= 7;
    }
    *o++ = (byte)u;
    s->size = o - s->out;
}

static int truncated(void) {
    PyErr_SetString(PyExc_ValueError, "packed message frame is truncated or its range does not end on an entry");
    return -1;
}

/* What append_packed carries from one message to the next (the builder's fields). */
typedef struct {
    uint64_t offset_delta;     /* > INT64_MAX only after 2**63 records: an error if one more follows */
    int64_t base_timestamp;
    int has_base_timestamp;    /* base_timestamp is None until the first message */
    int64_t max_timestamp;
} BuilderState;

/* The record headers of ``count`` packed headers at *p (uint16 name_len, int32 value_len, name, value;
 * negative value_len = null), written to s; advances *p. Returns 0 or -1 with ValueError set. */
static int packed_headers(const byte **p, const byte *stop, unsigned count, Sink *s) {
    const byte *q = *p;
    emit_varint(s, count);
    for (unsigned i = 0; i < count; i++) {
        if (stop - q < PACKED_HEADER_SIZE) return truncated();
        Py_ssize_t name_len = (Py_ssize_t)get_le(q, 2);
        int32_t value_len = as_int32((uint32_t)get_le(q + 2, 4));
        q += PACKED_HEADER_SIZE;
        if (name_len > stop - q) return truncated();
        emit_varint(s, name_len);
        emit(s, q, name_len);
        q += name_len;
        if (value_len < 0) {
            emit_byte(s, 1);  /* varint -1: null */
        } else {
            if (value_len > stop - q) return truncated();
            emit_varint(s, value_len);
            emit(s, q, value_len);
            q += value_len;
        }
    }
    *p = q;
    return 0;
}

/* Encodes the messages packed in frame[start:end] as v2 records into s, updating st as
 * RecordBatchBuilder.append_packed_py updates the builder. Returns 0 or -1 with ValueError set. */
static int encode_packed(const byte *frame, Py_ssize_t start, Py_ssize_t end, BuilderState *st, Sink *s) {
    const byte *p = frame + start, *stop = frame + end;
    while (p < stop) {
        if (stop - p < PACKED_ENTRY_SIZE) return truncated();
        int64_t timestamp = as_int64(get_le(p, 8));
        int32_t key_len = as_int32((uint32_t)get_le(p + 8, 4));
        int32_t value_len = as_int32((uint32_t)get_le(p + 12, 4));
        unsigned header_count = (unsigned)get_le(p + 16, 2);
        p += PACKED_ENTRY_SIZE;
        if (!st->has_base_timestamp) {
            st->base_timestamp = timestamp;
            st->has_base_timestamp = 1;
        }
        if (timestamp > st->max_timestamp) st->max_timestamp = timestamp;
        int64_t timestamp_delta;
        if (!sub_int64(timestamp, st->base_timestamp, &timestamp_delta)) {
            PyErr_Format(PyExc_ValueError, "timestamp delta %lld - %lld does not fit in 64 bits",
                         (long long)timestamp, (long long)st->base_timestamp);
            return -1;
        }
        if (st->offset_delta > (uint64_t)INT64_MAX) {
            PyErr_SetString(PyExc_ValueError, "offset delta does not fit in 64 bits");
            return -1;
        }
        const byte *key = p, *value, *headers;
        if (key_len > 0) {
            if (key_len > stop - p) return truncated();
            p += key_len;
        }
        value = p;
        if (value_len > 0) {
            if (value_len > stop - p) return truncated();
            p += value_len;
        }
        headers = p;
        Sink measured = {NULL, 1};  /* no headers: one byte, count 0 */
        if (header_count) {
            measured.size = 0;
            if (packed_headers(&p, stop, header_count, &measured) < 0) return -1;
        }
        int64_t body = 1 + varint_size(timestamp_delta) + varint_size((int64_t)st->offset_delta) +
                       (key_len < 0 ? 1 : (int64_t)key_len + varint_size(key_len)) +
                       (value_len < 0 ? 1 : (int64_t)value_len + varint_size(value_len)) + measured.size;
        emit_varint(s, body);
        emit_byte(s, 0);  /* record attributes */
        emit_varint(s, timestamp_delta);
        emit_varint(s, (int64_t)st->offset_delta);
        if (key_len < 0) {
            emit_byte(s, 1);
        } else {
            emit_varint(s, key_len);
            emit(s, key, key_len);
        }
        if (value_len < 0) {
            emit_byte(s, 1);
        } else {
            emit_varint(s, value_len);
            emit(s, value, value_len);
        }
        if (!header_count) {
            emit_byte(s, 0);
        } else if (s->out == NULL) {
            s->size += measured.size;
        } else if (packed_headers(&headers, stop, header_count, s) < 0) {
            return -1;
        }
        st->offset_delta++;
    }
    return 0;
}

/* Drops what this call appended to records after an error, keeping that error: the builder's fields are
 * only updated from the result, so its records must stay as they were. */
static void take_back(PyObject *records, Py_ssize_t mark) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (PyByteArray_Resize(records, mark) < 0) PyErr_Clear();  /* a shrink: cannot fail in practice */
    PyErr_Restore(type, value, traceback);
}

static PyObject *append_packed(PyObject *module, PyObject *args) {
    PyObject *records, *base_timestamp;
    Py_buffer frame;
    Py_ssize_t start, end;
    long long offset_delta, max_timestamp;
    if (!PyArg_ParseTuple(args, "O!y*nnLOL:append_packed", &PyByteArray_Type, &records, &frame, &start, &end,
                          &offset_delta, &base_timestamp, &max_timestamp))
        return NULL;
    PyObject *result = NULL;
    BuilderState initial = {0, 0, base_timestamp != Py_None, max_timestamp};
    if (start < 0 || start > end || end > frame.len) {
        PyErr_Format(PyExc_ValueError, "packed range %zd..%zd is not inside a frame of %zd bytes", start, end,
                     frame.len);
        goto done;
    }
    if (offset_delta < 0) {
        PyErr_SetString(PyExc_ValueError, "offset delta must not be negative");
        goto done;
    }
    initial.offset_delta = (uint64_t)offset_delta;
    if (initial.has_base_timestamp) {
        initial.base_timestamp = PyLong_AsLongLong(base_timestamp);
        if (initial.base_timestamp == -1 && PyErr_Occurred()) goto done;
    }
    /* Records take at most 36/18 of their packed size (records/packed.py): the sizes below cannot
     * overflow once the range is this small, which any frame that fits in memory is. */
    if (end - start > PY_SSIZE_T_MAX / 4) {
        PyErr_NoMemory();
        goto done;
    }
    BuilderState st = initial;
    Sink measure = {NULL, 0};
    if (encode_packed(frame.buf, start, end, &st, &measure) < 0) goto done;
    Py_ssize_t mark = PyByteArray_GET_SIZE(records);
    if (measure.size > PY_SSIZE_T_MAX - mark) {
        PyErr_NoMemory();
        goto done;
    }
    if (PyByteArray_Resize(records, mark + measure.size) < 0) goto done;
    Sink write = {(byte *)PyByteArray_AS_STRING(records) + mark, 0};
    st = initial;
    if (encode_packed(frame.buf, start, end, &st, &write) < 0 || write.size != measure.size) {
        /* Not reachable: the measuring pass checked the same bytes. */
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "append_packed: passes disagree");
        take_back(records, mark);
        goto done;
    }
    PyObject *base = st.has_base_timestamp ? PyLong_FromLongLong(st.base_timestamp) : Py_None;
    if (base == Py_None) Py_INCREF(base);
    if (base != NULL)
        result = Py_BuildValue("nNL", (Py_ssize_t)(st.offset_delta - initial.offset_delta), base,
                               (long long)st.max_timestamp);
    if (result == NULL) take_back(records, mark);  /* no memory for the result */
done:
    PyBuffer_Release(&frame);
    return result;
}

/* ======================================================================================================
 * Module
 * ==================================================================================================== */

static PyMethodDef module_methods[] = {
    {"pack_v2_records", pack_v2_records, METH_VARARGS,
     "pack_v2_records(index, data, pos, end, count, delta, base_offset, base_timestamp, fixed_timestamp, "
     "timestamp_type, leader_epoch, min_offset) -> (added, last_offset)\n\n"
     "C twin of kqactors.records.reader_v2.pack_v2_records (without its pack argument: the entry layout is "
     "INDEX_ENTRY_FORMAT)."},
    {"append_packed", append_packed, METH_VARARGS,
     "append_packed(records, frame, start, end, offset_delta, base_timestamp, max_timestamp) -> "
     "(appended, base_timestamp, max_timestamp)\n\n"
     "C twin of RecordBatchBuilder.append_packed_py: appends the encoded records to the bytearray records, "
     "all of them or (on ValueError) none."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_records_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kqactors.native._native_records",
    .m_doc = "Optional C twins of the record codec's per-record loops (see kqactors/native/__init__.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__native_records(void) {
    PyObject *m = PyModule_Create(&native_records_module);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "INDEX_ENTRY_FORMAT", INDEX_ENTRY_FORMAT) < 0 ||
        PyModule_AddIntConstant(m, "INDEX_ENTRY_SIZE", INDEX_ENTRY_SIZE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
