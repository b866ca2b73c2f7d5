/* The subset of a stored Record's bytes, cut in one pass of C.
 *
 * Job: what `CachedRecord.proto_subset_bytes` (broker/subscription/delivery.py)
 * builds through the protobuf classes, and `subset_wire.subset_bytes` through
 * numpy, for a dispatcher following the tail: a Key_Shared consumer's events
 * of one stored record as a subset Record with an `offsets` column. Those
 * cost 10-30 microseconds a subset in the broker (a Python object per event
 * and column, or a dozen numpy calls); this walks the stored bytes once and
 * writes the subset's bytes into one new bytes object.
 *
 * Rules (the same as subset_wire.py's):
 * 1. The Record's top-level fields are walked to find the batch (field 7),
 *    then the EventBatch's fields. A column with one entry per event (and
 *    more than one event) gives the entries at `positions`; any other column
 *    (a broadcast entry) is copied whole; an empty one is left out.
 * 2. The subset is `head` (Record fields 1-6, serialized by the caller once
 *    per record), the batch (count, then the columns in field order) and the
 *    packed `offsets` base + position: the bytes protobuf's serializer writes
 *    for that message, every element's bytes as stored.
 *    `delivery` frames that subset as delivery.py's `_one_part` does: the whole
 *    SubscribeResponse a dispatcher following the tail queues for a consumer.
 * 3. Anything the walk does not expect (a numeric column not packed or in two
 *    pieces, a varint that protobuf would not write, a group, truncated
 *    bytes, a position out of range) gives None: the caller cuts the subset
 *    through the protobuf classes instead. Unknown fields are left out, as
 *    the protobuf classes leave them out of a subset they build.
 *
 * It must not know about consumers, deliveries, caches or the event loop.
 */

#include "_record_wire.h"

#define CUT_VERSION 2
#define STACK_SPANS 256

static uint8_t *write_varint(uint8_t *out, uint64_t value) {
    while (value >= 0x80) {
        *out++ = (uint8_t)(value | 0x80);
        value >>= 7;
    }
    *out++ = (uint8_t)value;
    return out;
}

/* Whether `column` gives the entries at the positions (else it is copied whole). */
static int per_event(const Column *column, Py_ssize_t count) {
    return column->count == count && count > 1;
}

/* The span of a column's i-th element in the subset: the entry at positions[i] when
 * `picked` (per_event), else its own i-th (a column copied whole). */
static const Span *chosen_span(const Span *spans, const Column *column, int picked,
                               const int64_t *positions, Py_ssize_t i) {
    return &spans[column->first + (picked ? positions[i] : i)];
}

/* A subset planned: where its parts lie in the body and how large it will be. */
typedef struct {
    const uint8_t *body;
    const int64_t *positions;
    Py_ssize_t n, count;
    uint64_t base;
    Column columns[FIELDS];
    Py_ssize_t column_size[FIELDS];
    Span *spans;
    Span stack_spans[STACK_SPANS];
    Py_ssize_t batch_size, offsets_size;
} Plan;

/* Plan the subset; 0: not laid out as expected or a position out of range (rule 3),
 * -1: out of memory (an exception is set). */
static int plan_subset(Plan *plan, const uint8_t *body, Py_ssize_t body_size,
                       uint64_t base, Py_ssize_t count, const int64_t *positions,
                       Py_ssize_t n) {
    const uint8_t *batch, *batch_end;
    plan->body = body;
    plan->positions = positions;
    plan->n = n;
    plan->count = count;
    plan->base = base;
    plan->spans = plan->stack_spans;
    memset(plan->columns, 0, sizeof plan->columns);
    memset(plan->column_size, 0, sizeof plan->column_size);
    if (n < 1 || count < 1 || !find_batch(body, body + body_size, &batch, &batch_end) ||
        !walk_batch(body, batch, batch_end, plan->columns, NULL)) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (positions[i] < 0 || positions[i] >= count) return 0;
    }
    Py_ssize_t total_spans = 0;
    for (int f = 0; f < FIELDS; f++) {
        plan->columns[f].first = total_spans;
        total_spans += plan->columns[f].count;
    }
    if (total_spans > STACK_SPANS) {
        plan->spans = PyMem_Malloc(sizeof(Span) * (size_t)total_spans);
        if (plan->spans == NULL) {
            plan->spans = plan->stack_spans;
            PyErr_NoMemory();
            return -1;
        }
    }
    walk_batch(body, batch, batch_end, plan->columns, plan->spans); /* checked above */
    /* sizes first, so the bytes are written once into an object of the right size */
    plan->batch_size = 1 + varint_size((uint64_t)n); /* count */
    for (int f = 2; f < FIELDS; f++) {
        const Column *column = &plan->columns[f];
        if (column->count == 0) continue;
        int picked = per_event(column, count);
        Py_ssize_t chosen = picked ? n : column->count;
        Py_ssize_t size = 0;
        for (Py_ssize_t i = 0; i < chosen; i++) {
            const Span *span = chosen_span(plan->spans, column, picked, positions, i);
            size += KIND[f] == 2 ? 1 + varint_size((uint64_t)span->size) + span->size
                                 : span->size;
        }
        plan->column_size[f] = size;
        plan->batch_size += KIND[f] == 2 ? size : 1 + varint_size((uint64_t)size) + size;
    }
    plan->offsets_size = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        plan->offsets_size += varint_size(base + (uint64_t)positions[i]);
    }
    return 1;
}

static void release_plan(Plan *plan) {
    if (plan->spans != plan->stack_spans) PyMem_Free(plan->spans);
    plan->spans = plan->stack_spans;
}

/* The subset's size after a head of `head_size` bytes. */
static Py_ssize_t subset_size(const Plan *plan, Py_ssize_t head_size) {
    return head_size + 1 + varint_size((uint64_t)plan->batch_size) + plan->batch_size +
           1 + varint_size((uint64_t)plan->offsets_size) + plan->offsets_size;
}

static uint8_t *write_subset(const Plan *plan, uint8_t *out, const char *head,
                             Py_ssize_t head_size) {
    const int64_t *positions = plan->positions;
    memcpy(out, head, (size_t)head_size);
    out += head_size;
    *out++ = (BATCH_FIELD << 3) | 2;
    out = write_varint(out, (uint64_t)plan->batch_size);
    *out++ = (1 << 3) | 0; /* count */
    out = write_varint(out, (uint64_t)plan->n);
    for (int f = 2; f < FIELDS; f++) {
        const Column *column = &plan->columns[f];
        if (column->count == 0) continue;
        int picked = per_event(column, plan->count);
        Py_ssize_t chosen = picked ? plan->n : column->count;
        if (KIND[f] == 1) {
            *out++ = (uint8_t)((f << 3) | 2);
            out = write_varint(out, (uint64_t)plan->column_size[f]);
        }
        for (Py_ssize_t i = 0; i < chosen; i++) {
            const Span *span = chosen_span(plan->spans, column, picked, positions, i);
            if (KIND[f] == 2) {
                *out++ = (uint8_t)((f << 3) | 2);
                out = write_varint(out, (uint64_t)span->size);
            }
            memcpy(out, plan->body + span->start, (size_t)span->size);
            out += span->size;
        }
    }
    *out++ = (8 << 3) | 2; /* Record.offsets, packed */
    out = write_varint(out, (uint64_t)plan->offsets_size);
    for (Py_ssize_t i = 0; i < plan->n; i++) {
        out = write_varint(out, plan->base + (uint64_t)positions[i]);
    }
    return out;
}

/* One call's buffers and plan. */
typedef struct {
    Py_buffer body, positions;
    Plan plan;
} Call;

/* Plan the call's subset (its body parsed already): 1 planned, 0 not laid out as
 * expected (rule 3), -1 with an exception set. close_call releases it either way. */
static int open_call(Call *call, PyObject *positions, uint64_t base, Py_ssize_t count) {
    call->plan.spans = call->plan.stack_spans;
    if (!get_array(positions, &call->positions, 8, "l", "q", "positions")) return -1;
    return plan_subset(&call->plan, call->body.buf, call->body.len, base, count,
                       call->positions.buf, call->positions.len / 8);
}

static void close_call(Call *call) {
    release_plan(&call->plan);
    if (call->positions.obj != NULL) PyBuffer_Release(&call->positions);
    PyBuffer_Release(&call->body);
}

/* cut(body, head, base, count, positions) -> bytes | None */
static PyObject *cut(PyObject *self, PyObject *args) {
    Call call;
    PyObject *positions, *result = NULL;
    const char *head;
    Py_ssize_t head_size, count;
    unsigned long long base;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y#KnO", &call.body, &head, &head_size, &base, &count,
                          &positions)) {
        return NULL;
    }
    int planned = open_call(&call, positions, base, count);
    if (planned == 0) {
        result = Py_NewRef(Py_None);
    } else if (planned > 0) {
        result = PyBytes_FromStringAndSize(NULL, subset_size(&call.plan, head_size));
        if (result != NULL) {
            write_subset(&call.plan, (uint8_t *)PyBytes_AS_STRING(result), head, head_size);
        }
    }
    close_call(&call);
    return result;
}

/* The SubscribeResponse delivering the planned subset (`record` bytes) as one part. */
static PyObject *framed_delivery(const Plan *plan, const char *head, Py_ssize_t head_size,
                                 Py_ssize_t record, uint64_t last, uint64_t nacks_seen,
                                 uint64_t send) {
    /* Delivery: records (5), window_last_offsets (4, packed), nacks_seen (6), send (7) */
    Py_ssize_t inner = 1 + varint_size((uint64_t)record) + record +
                       1 + 1 + varint_size(last); /* a varint's size fits one byte */
    if (nacks_seen) inner += 1 + varint_size(nacks_seen);
    if (send) inner += 1 + varint_size(send);
    PyObject *result = PyBytes_FromStringAndSize(NULL, 1 + varint_size((uint64_t)inner) + inner);
    if (result == NULL) return NULL;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    *out++ = (1 << 3) | 2; /* SubscribeResponse.delivery */
    out = write_varint(out, (uint64_t)inner);
    *out++ = (5 << 3) | 2;
    out = write_varint(out, (uint64_t)record);
    out = write_subset(plan, out, head, head_size);
    *out++ = (4 << 3) | 2;
    *out++ = (uint8_t)varint_size(last);
    out = write_varint(out, last);
    if (nacks_seen) {
        *out++ = (6 << 3) | 0;
        out = write_varint(out, nacks_seen);
    }
    if (send) {
        *out++ = (7 << 3) | 0;
        write_varint(out, send);
    }
    return result;
}

/* delivery(body, head, base, count, positions, last, nacks_seen, send, bytes_max)
 *   -> bytes | None | False
 * The SubscribeResponse(delivery=Delivery(records=[subset], window_last_offsets=[last],
 * nacks_seen, send)) carrying the subset, as delivery.py's `_one_part` frames it; False
 * when the subset is larger than bytes_max (split it in Python). */
static PyObject *delivery(PyObject *self, PyObject *args) {
    Call call;
    PyObject *positions, *result = NULL;
    const char *head;
    Py_ssize_t head_size, count, bytes_max;
    unsigned long long base, last, nacks_seen, send;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y#KnOKKKn", &call.body, &head, &head_size, &base, &count,
                          &positions, &last, &nacks_seen, &send, &bytes_max)) {
        return NULL;
    }
    int planned = open_call(&call, positions, base, count);
    if (planned == 0) {
        result = Py_NewRef(Py_None);
    } else if (planned > 0) {
        Py_ssize_t record = subset_size(&call.plan, head_size);
        result = record > bytes_max ? Py_NewRef(Py_False)
                                    : framed_delivery(&call.plan, head, head_size, record,
                                                      last, nacks_seen, send);
    }
    close_call(&call);
    return result;
}

static PyMethodDef METHODS[] = {
    {"cut", cut, METH_VARARGS,
     "cut(body, head, base, count, positions) -> bytes | None\n\n"
     "The subset Record of the events at `positions` (a contiguous int64 array, each\n"
     "below `count`) of the stored Record `body`: `head` (its fields 1-6), the batch's\n"
     "chosen entries and the offsets base + position. None: the bytes are not laid out\n"
     "as protobuf writes them, or a position is out of range (cut it another way)."},
    {"delivery", delivery, METH_VARARGS,
     "delivery(body, head, base, count, positions, last, nacks_seen, send, bytes_max)\n"
     "    -> bytes | None | False\n\n"
     "The serialized SubscribeResponse delivering that subset as one record part whose\n"
     "window ends at `last`; None as for cut(); False when the subset is larger than\n"
     "`bytes_max` (split it another way)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_record_cut",
    "Subsets of stored Records cut from their bytes in C (see _record_cut.c).", -1, METHODS,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_cut(void) { return versioned_module(&MODULE, CUT_VERSION); }
