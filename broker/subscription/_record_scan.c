/* What a dispatcher needs of a stored Record besides its parsed form, read from its
 * bytes in C.
 *
 * Job: `log_reader.parse_record` (broker/subscription/log_reader.py) keeps, for each
 * record a dispatcher reads, its slot column as an int32 array (for the Key_Shared
 * plan) and the head every subset of the record starts with (the Record's fields
 * before the batch, `CachedRecord.header`). Built from the parsed record, the array
 * (one Python int per event) and the head (a Record made and serialized again) cost
 * about 4 microseconds a record, every record a subscription follows; `scan` reads
 * both from the bytes. The record is still parsed by protobuf first, so only bytes
 * protobuf accepts get here.
 *
 * Rules:
 * 1. The head is the bytes before the batch (field 7) when they are what
 *    protobuf writes for `Record(topic, partition, base_offset=base, scn_first,
 *    window, publish_time_ms)`: fields 1-6 in order, each at most once, none
 *    with its default value (proto3 leaves those out), varints no longer than
 *    needed, the topic valid UTF-8, and base_offset equal to the record's key
 *    (`base`; absent when that is 0). After the batch only fields above 7 may
 *    come.
 * 2. The slots are the batch's packed `slots` column, one entry per event
 *    (`count`), each at most INT32_MAX, as int32s in a new bytearray.
 * 3. The batch is walked as the cut walks it (_record_wire.h). Anything else
 *    (rule 1 or 2 broken, malformed bytes) gives None: the caller builds both
 *    from the parsed record, as before.
 *
 * It must not know about consumers, caches or the event loop.
 */

#include "_record_wire.h"

#define SCAN_VERSION 1
#define HEAD_FIELDS 6 /* Record fields 1-6: topic, partition, base_offset, scn_first,
                         window, publish_time_ms */
#define SLOTS_FIELD 5

/* A varint field of the head: its value, as protobuf writes it (no longer than needed,
 * never 0); 0 when it is not. */
static int head_varint(const uint8_t **p, const uint8_t *end, uint64_t *value) {
    const uint8_t *start = *p;
    return read_varint(p, end, value) && *value != 0 && *p - start == varint_size(*value);
}

/* The topic (field 1): a length no longer than needed, not 0, valid UTF-8. An ASCII
 * topic (nearly every one) is valid as it is, with no string made to check it. */
static int head_topic(const uint8_t **p, const uint8_t *end) {
    uint64_t size;
    if (!head_varint(p, end, &size) || (uint64_t)(end - *p) < size) return 0;
    int ascii = 1;
    for (uint64_t i = 0; i < size && ascii; i++) ascii = (*p)[i] < 0x80;
    if (!ascii) {
        PyObject *text = PyUnicode_DecodeUTF8((const char *)*p, (Py_ssize_t)size, "strict");
        if (text == NULL) {
            PyErr_Clear();
            return 0;
        }
        Py_DECREF(text);
    }
    *p += size;
    return 1;
}

/* Rule 1 over the whole Record: where the batch's payload lies and where the head ends;
 * 0 when the bytes are not laid out so. */
static int walk_record(const uint8_t *body, const uint8_t *end, uint64_t base,
                       Py_ssize_t *head_end, const uint8_t **batch, const uint8_t **batch_end) {
    const uint8_t *p = body;
    uint64_t last = 0, value;
    int base_seen = 0;
    *batch = NULL;
    while (p < end) {
        const uint8_t *field = p;
        uint64_t key;
        if (!read_varint(&p, end, &key)) return 0;
        uint64_t number = key >> 3;
        int wire = (int)(key & 7);
        if (*batch == NULL && number <= HEAD_FIELDS) {
            if (number <= last || wire != (number == 1 ? 2 : 0))
                return 0; /* out of order, repeated or of another wire type */
            last = number;
            if (number == 1) {
                if (!head_topic(&p, end)) return 0;
            } else {
                if (!head_varint(&p, end, &value)) return 0;
                if ((number == 2 && value > UINT32_MAX) || (number == 5 && value != 1))
                    return 0;
                if (number == 3) {
                    if (value != base) return 0;
                    base_seen = 1;
                }
            }
        } else if (*batch == NULL && number == BATCH_FIELD && wire == 2) {
            uint64_t size;
            if (!read_varint(&p, end, &size) || (uint64_t)(end - p) < size) return 0;
            *head_end = field - body;
            *batch = p;
            *batch_end = p + size;
            p += size;
        } else if (*batch != NULL && number > BATCH_FIELD) {
            if (!skip_value(&p, end, wire)) return 0;
        } else {
            return 0; /* a head field after the batch, a second batch, field 0 */
        }
    }
    return *batch != NULL && base_seen == (base != 0);
}

/* Rule 2: the slots, one per event, into `out` (count int32s); 0 when not so. */
static int read_slots(const uint8_t *p, const uint8_t *end, Py_ssize_t count, int32_t *out) {
    while (p < end) {
        uint64_t key, size;
        if (!read_varint(&p, end, &key)) return 0;
        if ((key >> 3) != SLOTS_FIELD) {
            if (!skip_value(&p, end, (int)(key & 7))) return 0;
            continue;
        }
        /* walk_batch has checked: packed, in one piece, protobuf's varints */
        if (!read_varint(&p, end, &size) || (uint64_t)(end - p) < size) return 0;
        const uint8_t *payload_end = p + size;
        Py_ssize_t i = 0;
        while (p < payload_end) {
            uint64_t slot;
            if (i == count || !read_varint(&p, payload_end, &slot) || slot > INT32_MAX)
                return 0;
            out[i++] = (int32_t)slot;
        }
        return i == count;
    }
    return 0;
}

/* scan(body, base, count) -> (head: bytes, slots: bytearray of int32) | None */
static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer body;
    unsigned long long base;
    Py_ssize_t count;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*Kn", &body, &base, &count)) return NULL;
    const uint8_t *start = body.buf, *end = start + body.len;
    const uint8_t *batch, *batch_end;
    Py_ssize_t head_end = 0;
    Column columns[FIELDS];
    PyObject *result = NULL;
    if (count < 1 || !walk_record(start, end, base, &head_end, &batch, &batch_end) ||
        !walk_batch(start, batch, batch_end, columns, NULL) ||
        columns[SLOTS_FIELD].count != count) {
        PyBuffer_Release(&body);
        Py_RETURN_NONE;
    }
    PyObject *slots = PyByteArray_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int32_t));
    if (slots == NULL) goto done;
    if (!read_slots(batch, batch_end, count, (int32_t *)PyByteArray_AS_STRING(slots))) {
        Py_DECREF(slots);
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *head = PyBytes_FromStringAndSize((const char *)start, head_end);
    if (head == NULL) {
        Py_DECREF(slots);
        goto done;
    }
    result = PyTuple_Pack(2, head, slots);
    Py_DECREF(head);
    Py_DECREF(slots);
done:
    PyBuffer_Release(&body);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS,
     "scan(body, base, count) -> (head, slots) | None: a stored Record's fields before "
     "its batch and its slot column (int32s), read from its bytes; None: parse it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_record_scan",
    "A stored Record's head and slots read from its bytes (broker/subscription/log_reader.py).",
    -1, METHODS, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_scan(void) { return versioned_module(&MODULE, SCAN_VERSION); }
