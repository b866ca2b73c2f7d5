/* The protobuf wire walk that the record modules (_record_cut.c, _record_scan.c) share:
 * varints, skipping a field, finding a stored Record's batch and walking the batch's
 * columns, each refusing what protobuf's serializer would not write (rule 3 of
 * _record_cut.c). Static inline: each module keeps what it uses. */

#ifndef KEYBUS_RECORD_WIRE_H
#define KEYBUS_RECORD_WIRE_H

#include "_native.h"
#include <stdint.h>

#define FIELDS 12 /* EventBatch fields 1-11 */
#define BATCH_FIELD 7
#define OPCODES_FIELD 8

/* How each EventBatch field is encoded: 0 not a column, 1 packed varints, 2 elements */
static const int KIND[FIELDS] = {0, 0, 1, 2, 2, 1, 2, 2, 1, 2, 2, 1};
/* The widest value a packed column's varint may carry, as protobuf writes it (an enum's
 * negative values are sign-extended to 64 bits) */
static const uint64_t PACKED_MAX[FIELDS] = {0, 0, UINT64_MAX, 0, 0, 0xFFFFFFFFu, 0, 0,
                                            UINT64_MAX, 0, 0, UINT64_MAX};

typedef struct {
    Py_ssize_t start; /* the element's payload (packed: its varint) in the body */
    Py_ssize_t size;
} Span;

typedef struct {
    Py_ssize_t count; /* elements found */
    Py_ssize_t first; /* index of its first span in the span table */
} Column;

/* A varint at *p; 0 when truncated or longer than 10 bytes. */
static inline int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t value = 0;
    for (int i = 0; i < 10 && *p < end; i++) {
        uint8_t byte = *(*p)++;
        value |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            *out = value;
            return 1;
        }
    }
    return 0;
}

static inline Py_ssize_t varint_size(uint64_t value) {
    Py_ssize_t n = 1;
    while (value >= 0x80) {
        value >>= 7;
        n++;
    }
    return n;
}

/* Skip one field's value of `wire` type; 0 when it cannot be skipped. */
static inline int skip_value(const uint8_t **p, const uint8_t *end, int wire) {
    uint64_t size;
    switch (wire) {
    case 0:
        return read_varint(p, end, &size);
    case 1:
        if (end - *p < 8) return 0;
        *p += 8;
        return 1;
    case 2:
        if (!read_varint(p, end, &size) || (uint64_t)(end - *p) < size) return 0;
        *p += size;
        return 1;
    case 5:
        if (end - *p < 4) return 0;
        *p += 4;
        return 1;
    default:
        return 0; /* groups: protobuf writes none in these messages */
    }
}

/* The batch's payload in the Record's bytes; 0 when absent twice or malformed. */
static inline int find_batch(const uint8_t *p, const uint8_t *end, const uint8_t **batch,
                             const uint8_t **batch_end) {
    *batch = NULL;
    while (p < end) {
        uint64_t key, size;
        if (!read_varint(&p, end, &key)) return 0;
        if ((key >> 3) == BATCH_FIELD && (key & 7) == 2) {
            if (*batch != NULL) return 0; /* in two pieces: protobuf would merge them */
            if (!read_varint(&p, end, &size) || (uint64_t)(end - p) < size) return 0;
            *batch = p;
            *batch_end = p + size;
            p += size;
        } else if (!skip_value(&p, end, (int)(key & 7))) {
            return 0;
        }
    }
    return *batch != NULL;
}

/* Walk the batch: `spans` NULL counts the elements of each column (and checks
 * them), else records each element's span. 0 when not laid out as expected. */
static inline int walk_batch(const uint8_t *body, const uint8_t *p, const uint8_t *end,
                             Column *columns, Span *spans) {
    int seen_packed[FIELDS] = {0};
    Py_ssize_t filled[FIELDS] = {0};
    while (p < end) {
        uint64_t key, size;
        if (!read_varint(&p, end, &key)) return 0;
        uint64_t number = key >> 3;
        int wire = (int)(key & 7);
        int kind = number < FIELDS ? KIND[number] : 0;
        if (kind == 0) {
            if (!skip_value(&p, end, wire)) return 0;
            continue;
        }
        if (wire != 2) return 0; /* a numeric column not packed */
        if (!read_varint(&p, end, &size) || (uint64_t)(end - p) < size) return 0;
        const uint8_t *payload_end = p + size;
        if (kind == 2) { /* one element: a string, bytes or message */
            if (spans != NULL) {
                Span *span = &spans[columns[number].first + filled[number]];
                span->start = p - body;
                span->size = (Py_ssize_t)size;
            }
            filled[number]++;
            p = payload_end;
            continue;
        }
        if (seen_packed[number]++) return 0; /* a packed column in two pieces */
        while (p < payload_end) {
            const uint8_t *element = p;
            uint64_t value;
            if (!read_varint(&p, payload_end, &value)) return 0;
            /* as protobuf writes it: in range, and no longer than it needs */
            if (value > PACKED_MAX[number] || p - element != varint_size(value)) return 0;
            if (number == OPCODES_FIELD && value > INT32_MAX && value < (uint64_t)INT32_MIN)
                return 0; /* an enum is an int32, sign-extended */
            if (spans != NULL) {
                Span *span = &spans[columns[number].first + filled[number]];
                span->start = element - body;
                span->size = p - element;
            }
            filled[number]++;
        }
    }
    if (spans == NULL) {
        for (int f = 0; f < FIELDS; f++) columns[f].count = filled[f];
    }
    return 1;
}

#endif
