/* A compacted view pass's fold of plain records, read from their bytes in C.
 *
 * Job: `fold_native.fold_bodies` (broker/view/fold_native.py) folds the stored records
 * of a pass into the latest entry of each (source, key). In Python (fold.py) each record
 * is parsed by protobuf and the winners' entries are built with numpy and a list
 * comprehension, holding the GIL for most of a pass: 10,000 events cost 30-60 CPU-ms,
 * while the broker's event loop waits for the GIL and shares the two cores with it
 * (the view's pass is what the p99 of the latency benchmark pays, benchmarks/RESULTS.md).
 * Here the records' bytes are walked and the winners chosen with the GIL released;
 * only the entries' bytes objects are made with it.
 *
 * Rules:
 * 1. Only the common case is folded here: every record with events is plain
 *    (no offsets, scns or publish_times_ms; no ordering keys, schemas or headers;
 *    slots of 1 or count entries), keyed by ints (no key_strings, key_ints and values
 *    of count entries), of at most one source, its optional columns of 0, 1 or count
 *    entries, its topic and source ASCII, and laid out as protobuf writes it
 *    (_record_wire.h; no field 0). Anything else gives None: the caller parses the
 *    records and folds them in Python, the reference.
 * 2. The result is fold.fold_records': the last event of each (source, key) in the
 *    pass wins; entries come in the order of their winning events; a DELETE winner
 *    adds a tombstone index entry. Records without events are left out, as there.
 * 3. Heads are ENTRY_HEAD of codec.py (43 bytes, big-endian); an event's offset is
 *    base + position, its SCN scn_first (a window) or scn_first + position.
 *
 * It must not know about RocksDB, the view's state or threads.
 */

#include "_record_wire.h"

#include <stdlib.h>

#define FOLD_VERSION 2
#define HEAD_SIZE 43
#define DELETE_OPCODE 1
#define SOURCES_MAX 64 /* distinct sources in one pass; more: None (rule 1) */
#define SOURCE_BYTES_MAX 0xFFFF

enum { KEY_INTS = 2, KEY_STRINGS, ORDERING_KEYS, SLOTS, VALUES, SOURCES, OPCODES, SCHEMAS,
       HEADERS, EVENT_TIMES };

typedef struct {
    uint64_t base, scn_first;
    int64_t publish;
    int window;
} Rec;

typedef struct {
    int64_t key, event_time;
    const uint8_t *value;
    Py_ssize_t value_size;
    Py_ssize_t rec, position;
    int32_t source;
    uint16_t slot;
    uint8_t opcode;
} Event;

typedef struct {
    int64_t key;
    int32_t source;
    Py_ssize_t number;
} Sorted;

typedef struct {
    const uint8_t *bytes;
    Py_ssize_t size;
} Source;

typedef struct {
    Rec *recs;
    Event *events;
    Py_ssize_t n_events, cap_events;
    Source sources[SOURCES_MAX];
    int n_sources;
    uint64_t end, scn_last;
    int no_memory;
} Pass;

static int is_plain_size(Py_ssize_t n, Py_ssize_t count) { return n == 0 || n == 1 || n == count; }

/* Text protobuf's parser accepts without a check here: ASCII (other UTF-8 goes to Python). */
static int ascii(const uint8_t *p, uint64_t size) {
    for (uint64_t i = 0; i < size; i++)
        if (p[i] >= 0x80) return 0;
    return 1;
}

/* The Record's fields besides the batch; 0 when not plain (rule 1) or malformed. */
static int walk_record(const uint8_t *p, const uint8_t *end, Rec *rec, const uint8_t **batch,
                       const uint8_t **batch_end) {
    memset(rec, 0, sizeof *rec);
    *batch = NULL;
    while (p < end) {
        uint64_t key, value, size;
        if (!read_varint(&p, end, &key)) return 0;
        uint64_t number = key >> 3;
        int wire = (int)(key & 7);
        if (number == 0 || key > UINT32_MAX) return 0; /* protobuf refuses field 0 */
        if (number == 1) {         /* the topic: text */
            if (wire != 2 || !read_varint(&p, end, &size) || (uint64_t)(end - p) < size ||
                !ascii(p, size))
                return 0;
            p += size;
        } else if (number >= 3 && number <= 6) {
            if (wire != 0 || !read_varint(&p, end, &value)) return 0;
            if (number == 3) rec->base = value;
            else if (number == 4) rec->scn_first = value;
            else if (number == 5) rec->window = value != 0;
            else rec->publish = (int64_t)value;
        } else if (number == BATCH_FIELD) {
            if (wire != 2 || *batch != NULL) return 0; /* protobuf would merge two */
            if (!read_varint(&p, end, &size) || (uint64_t)(end - p) < size) return 0;
            *batch = p;
            *batch_end = p + size;
            p += size;
        } else if (number >= 8 && number <= 10) {
            return 0; /* offsets, scns, publish_times_ms: not plain */
        } else if (!skip_value(&p, end, wire)) {
            return 0;
        }
    }
    return 1;
}

/* The batch's count (field 1) into *count; 0 when malformed or holding what protobuf
 * refuses (a field 0, a tag past 32 bits). Walks every field of the batch. */
static int batch_count(const uint8_t *p, const uint8_t *end, uint64_t *count) {
    *count = 0;
    while (p < end) {
        uint64_t key, value;
        if (!read_varint(&p, end, &key) || (key >> 3) == 0 || key > UINT32_MAX) return 0;
        if (key == (1 << 3)) {
            if (!read_varint(&p, end, &value)) return 0;
            *count = value;
        } else if (!skip_value(&p, end, (int)(key & 7))) {
            return 0;
        }
    }
    return 1;
}

/* The varint of element `i` of a packed column (its one element when it has one). */
static uint64_t element(const uint8_t *body, const Span *spans, const Column *column,
                        Py_ssize_t i) {
    const Span *span = &spans[column->first + (column->count == 1 ? 0 : i)];
    const uint8_t *p = body + span->start;
    uint64_t value = 0;
    read_varint(&p, p + span->size, &value); /* walk_batch checked it */
    return value;
}

static int32_t source_id(Pass *pass, const uint8_t *bytes, Py_ssize_t size) {
    for (int i = 0; i < pass->n_sources; i++) {
        Source *s = &pass->sources[i];
        if (s->size == size && memcmp(s->bytes, bytes, (size_t)size) == 0) return i;
    }
    if (pass->n_sources == SOURCES_MAX || size > SOURCE_BYTES_MAX) return -1;
    pass->sources[pass->n_sources] = (Source){bytes, size};
    return pass->n_sources++;
}

/* Add record `r`'s events to the pass; 0 when it is not plain or malformed. */
static int add_record(Pass *pass, Py_ssize_t r, const uint8_t *body, Py_ssize_t size) {
    const uint8_t *batch = NULL, *batch_end = NULL;
    Rec *rec = &pass->recs[r];
    if (!walk_record(body, body + size, rec, &batch, &batch_end)) return 0;
    if (batch == NULL) return 1; /* no batch: no events */
    uint64_t wide_count;
    Column columns[FIELDS];
    if (!batch_count(batch, batch_end, &wide_count) || wide_count > (uint64_t)INT32_MAX ||
        !walk_batch(body, batch, batch_end, columns, NULL))
        return 0;
    if (wide_count == 0) return 1; /* left out, as fold_records leaves it (rule 2) */
    Py_ssize_t count = (Py_ssize_t)wide_count;
    if (columns[KEY_STRINGS].count || columns[ORDERING_KEYS].count || columns[SCHEMAS].count ||
        columns[HEADERS].count || columns[KEY_INTS].count != count ||
        columns[VALUES].count != count || columns[SOURCES].count > 1 ||
        (columns[SLOTS].count != 1 && columns[SLOTS].count != count) ||
        !is_plain_size(columns[OPCODES].count, count) ||
        !is_plain_size(columns[EVENT_TIMES].count, count))
        return 0;
    Py_ssize_t elements = 0;
    for (int f = 0; f < FIELDS; f++) {
        columns[f].first = elements;
        elements += columns[f].count;
    }
    Span *spans = malloc(sizeof(Span) * (size_t)(elements ? elements : 1));
    if (spans == NULL) {
        pass->no_memory = 1;
        return 0;
    }
    int ok = walk_batch(body, batch, batch_end, columns, spans);
    int32_t source = 0;
    if (ok) {
        const Span *s = columns[SOURCES].count ? &spans[columns[SOURCES].first] : NULL;
        if (s != NULL && !ascii(body + s->start, (uint64_t)s->size)) ok = 0;
        else source = s ? source_id(pass, body + s->start, s->size) : source_id(pass, body, 0);
        ok = ok && source >= 0;
    }
    if (ok && pass->n_events + count > pass->cap_events) {
        Py_ssize_t cap = (pass->n_events + count) * 2;
        Event *grown = realloc(pass->events, sizeof(Event) * (size_t)cap);
        if (grown == NULL) {
            pass->no_memory = 1;
            ok = 0;
        } else {
            pass->events = grown;
            pass->cap_events = cap;
        }
    }
    for (Py_ssize_t i = 0; ok && i < count; i++) {
        Event *e = &pass->events[pass->n_events + i];
        uint64_t zigzag = element(body, spans, &columns[KEY_INTS], i);
        e->key = (int64_t)((zigzag >> 1) ^ (~(zigzag & 1) + 1));
        const Span *value = &spans[columns[VALUES].first + i];
        e->value = body + value->start;
        e->value_size = value->size;
        e->rec = r;
        e->position = i;
        e->source = source;
        e->slot = (uint16_t)element(body, spans, &columns[SLOTS], i);
        uint64_t opcode = columns[OPCODES].count ? element(body, spans, &columns[OPCODES], i) : 0;
        if (opcode > 0xFF) ok = 0; /* numpy's uint8 would not take it: Python decides */
        e->opcode = (uint8_t)opcode;
        e->event_time = columns[EVENT_TIMES].count
                            ? (int64_t)element(body, spans, &columns[EVENT_TIMES], i) : 0;
    }
    free(spans);
    if (!ok) return 0;
    pass->n_events += count;
    uint64_t end = rec->base + (uint64_t)count;
    uint64_t scn_last = rec->window ? rec->scn_first : rec->scn_first + (uint64_t)count - 1;
    if (end > pass->end) pass->end = end;
    if (scn_last > pass->scn_last) pass->scn_last = scn_last;
    return 1;
}

static int by_source_key_number(const void *a, const void *b) {
    const Sorted *x = a, *y = b;
    if (x->source != y->source) return x->source < y->source ? -1 : 1;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->number > y->number) - (x->number < y->number);
}

/* wins[n] = 1 for the last event of each (source, key); 0 when out of memory. */
static int choose_winners(const Pass *pass, uint8_t *wins) {
    Py_ssize_t n = pass->n_events;
    Sorted *sorted = malloc(sizeof(Sorted) * (size_t)(n ? n : 1));
    if (sorted == NULL) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        sorted[i] = (Sorted){pass->events[i].key, pass->events[i].source, i};
    qsort(sorted, (size_t)n, sizeof(Sorted), by_source_key_number);
    for (Py_ssize_t i = 0; i < n; i++) {
        int last = i + 1 == n || sorted[i + 1].key != sorted[i].key ||
                   sorted[i + 1].source != sorted[i].source;
        wins[sorted[i].number] = (uint8_t)last;
    }
    free(sorted);
    return 1;
}

static void put_be(uint8_t *out, uint64_t value, int size) {
    for (int i = size - 1; i >= 0; i--) {
        out[i] = (uint8_t)value;
        value >>= 8;
    }
}

/* The entry key of event `e` (prefix | source part | int key) into `out`. */
static Py_ssize_t entry_key(uint8_t *out, const Py_buffer *prefix, const Source *source,
                            const Event *e) {
    uint8_t *p = out;
    memcpy(p, prefix->buf, (size_t)prefix->len);
    p += prefix->len;
    put_be(p, (uint64_t)source->size, 2);
    p += 2;
    memcpy(p, source->bytes, (size_t)source->size);
    p += source->size;
    *p++ = 0; /* codec.INT_TAG */
    put_be(p, (uint64_t)e->key ^ ((uint64_t)1 << 63), 8);
    return p + 8 - out;
}

/* The entries, tombstones and position of the winners, as fold() returns them. */
static PyObject *build(const Pass *pass, const uint8_t *wins, const Py_buffer *prefix,
                       const Py_buffer *tombstone_prefix) {
    PyObject *keys = PyList_New(0), *values = PyList_New(0), *tombstones = PyList_New(0);
    uint8_t *key = malloc((size_t)prefix->len + 2 + SOURCE_BYTES_MAX + 9);
    PyObject *result = NULL;
    if (keys == NULL || values == NULL || tombstones == NULL || key == NULL) goto done;
    for (Py_ssize_t n = 0; n < pass->n_events; n++) {
        if (!wins[n]) continue;
        const Event *e = &pass->events[n];
        const Rec *rec = &pass->recs[e->rec];
        uint64_t offset = rec->base + (uint64_t)e->position;
        uint64_t scn = rec->window ? rec->scn_first : rec->scn_first + (uint64_t)e->position;
        Py_ssize_t key_size = entry_key(key, prefix, &pass->sources[e->source], e);
        PyObject *entry_key_bytes = PyBytes_FromStringAndSize((const char *)key, key_size);
        PyObject *value = PyBytes_FromStringAndSize(NULL, HEAD_SIZE + e->value_size);
        if (entry_key_bytes == NULL || value == NULL) {
            Py_XDECREF(entry_key_bytes);
            Py_XDECREF(value);
            goto done;
        }
        uint8_t *head = (uint8_t *)PyBytes_AS_STRING(value);
        memset(head, 0, HEAD_SIZE);
        put_be(head, offset, 8);
        put_be(head + 8, scn, 8);
        put_be(head + 16, (uint64_t)rec->publish, 8);
        put_be(head + 24, (uint64_t)e->event_time, 8);
        put_be(head + 32, e->slot, 2);
        head[34] = e->opcode;
        memcpy(head + HEAD_SIZE, e->value, (size_t)e->value_size);
        int failed = PyList_Append(keys, entry_key_bytes) < 0 || PyList_Append(values, value) < 0;
        Py_DECREF(value);
        if (!failed && e->opcode == DELETE_OPCODE) {
            uint8_t index[256];
            Py_ssize_t size = tombstone_prefix->len + 16;
            memcpy(index, tombstone_prefix->buf, (size_t)tombstone_prefix->len);
            put_be(index + tombstone_prefix->len, rec->publish > 0 ? (uint64_t)rec->publish : 0, 8);
            put_be(index + tombstone_prefix->len + 8, offset, 8);
            PyObject *entry = Py_BuildValue("(y#y#)", index, size, key + prefix->len,
                                            key_size - prefix->len);
            failed = entry == NULL || PyList_Append(tombstones, entry) < 0;
            Py_XDECREF(entry);
        }
        Py_DECREF(entry_key_bytes);
        if (failed) goto done;
    }
    result = Py_BuildValue("(OOOnKK)", keys, values, tombstones, pass->n_events,
                           (unsigned long long)pass->end, (unsigned long long)pass->scn_last);
done:
    free(key);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    Py_XDECREF(tombstones);
    return result;
}

/* fold(bodies, entry_prefix, tombstone_prefix)
 *   -> (keys, values, tombstones, events, end, scn_last) | None */
static PyObject *fold(PyObject *self, PyObject *args) {
    PyObject *bodies_arg;
    Py_buffer prefix, tombstone_prefix;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oy*y*", &bodies_arg, &prefix, &tombstone_prefix)) return NULL;
    PyObject *result = NULL;
    PyObject *bodies = PySequence_Tuple(bodies_arg); /* no other thread can change it */
    Py_ssize_t n_records = bodies ? PyTuple_GET_SIZE(bodies) : 0;
    Pass pass = {0};
    const uint8_t **starts = NULL;
    Py_ssize_t *sizes = NULL;
    uint8_t *wins = NULL;
    if (bodies == NULL) goto done;
    if (tombstone_prefix.len > 256 - 16) {
        PyErr_SetString(PyExc_ValueError, "tombstone_prefix is over 240 bytes");
        goto done;
    }
    starts = malloc(sizeof *starts * (size_t)(n_records ? n_records : 1));
    sizes = malloc(sizeof *sizes * (size_t)(n_records ? n_records : 1));
    pass.recs = malloc(sizeof(Rec) * (size_t)(n_records ? n_records : 1));
    if (starts == NULL || sizes == NULL || pass.recs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < n_records; r++) { /* the tuple holds them while we walk */
        PyObject *item = PyTuple_GET_ITEM(bodies, r);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "bodies must be a sequence of bytes");
            goto done;
        }
        starts[r] = (const uint8_t *)PyBytes_AS_STRING(item);
        sizes[r] = PyBytes_GET_SIZE(item);
    }
    int plain = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; plain && r < n_records; r++)
        plain = add_record(&pass, r, starts[r], sizes[r]);
    if (plain) {
        wins = calloc((size_t)(pass.n_events ? pass.n_events : 1), 1);
        if (wins == NULL || !choose_winners(&pass, wins)) {
            pass.no_memory = 1;
            plain = 0;
        }
    }
    Py_END_ALLOW_THREADS
    if (pass.no_memory) {
        PyErr_NoMemory();
        goto done;
    }
    if (!plain) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = build(&pass, wins, &prefix, &tombstone_prefix);
done:
    free(wins);
    free(pass.events);
    free(pass.recs);
    free(starts);
    free(sizes);
    Py_XDECREF(bodies);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&tombstone_prefix);
    return result;
}

static PyMethodDef METHODS[] = {
    {"fold", fold, METH_VARARGS,
     "fold(bodies, entry_prefix, tombstone_prefix) -> (keys, values, tombstones, events, "
     "end, scn_last) | None: the view entries of serialized plain Records' winning events "
     "(broker/view/fold.py's rules); None: fold the parsed records in Python."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_view_fold",
    "A compacted view pass's fold of plain records, from their bytes (broker/view/fold_native.py).",
    -1, METHODS, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__view_fold(void) { return versioned_module(&MODULE, FOLD_VERSION); }
