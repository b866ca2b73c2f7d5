/* The Key_Shared plan of a dispatch round, in one pass of C.
 *
 * Job: `dispatch.plan_keyed` (broker/subscription/dispatch.py, whose module
 * docstring holds the rules) without a Python step per candidate or a dozen
 * numpy calls per plan: about 20 CPU-microseconds a plan in the broker for a
 * dozen candidates, the plan of nearly every round that follows the tail.
 *
 * Rules (dispatch.py's rules 2-3, the same plan array for array):
 * 1. A candidate goes to the owner of its slot unless the slot has no owner
 *    (0), a flag in `blocking` is set for it, or its owner has no permit left;
 *    each owner gets its first candidates in candidate order, at most its
 *    permits.
 * 2. The plan is the positions of the sent candidates grouped by owner in
 *    owner index order, the owners, and the bounds of each owner's group; as
 *    three bytearrays of native Py_ssize_t (numpy's intp), for numpy to view.
 * 3. A slot outside the owner table, or an owner outside the permits, raises
 *    ValueError: the tables are the core's, so that is a fault, never a plan.
 *
 * It must not know about consumers, deliveries, caches or the event loop.
 */

#include "_native.h"
#include <stdint.h>

#define PLAN_VERSION 1

static PyObject *new_intp_array(Py_ssize_t n, Py_ssize_t **data) {
    PyObject *array = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(Py_ssize_t));
    if (array != NULL) *data = (Py_ssize_t *)PyByteArray_AS_STRING(array);
    return array;
}

/* The plan, once the arguments are read; NULL with an exception set. */
static PyObject *planned(const int32_t *slots, Py_ssize_t n, const uint32_t *owner_of_slot,
                         Py_ssize_t slot_count, const uint8_t *flags, const int64_t *permits,
                         Py_ssize_t owner_count, unsigned int blocking) {
    PyObject *result = NULL, *positions = NULL, *owners = NULL, *bounds = NULL;
    int64_t *left = PyMem_Calloc((size_t)owner_count + 1, sizeof(int64_t));
    Py_ssize_t *sent_to = PyMem_Malloc(((size_t)n + 1) * sizeof(Py_ssize_t));
    Py_ssize_t *start = PyMem_Calloc((size_t)owner_count + 1, sizeof(Py_ssize_t));
    if (left == NULL || sent_to == NULL || start == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(left, permits, (size_t)owner_count * sizeof(int64_t));
    Py_ssize_t sent = 0, groups = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t slot = slots[i];
        sent_to[i] = 0;
        if (slot < 0 || slot >= slot_count) {
            PyErr_Format(PyExc_ValueError, "candidate %zd has slot %d, outside the owner "
                         "table of %zd slots", i, (int)slot, slot_count);
            goto done;
        }
        uint32_t owner = owner_of_slot[slot];
        if (owner == 0 || (flags[slot] & blocking)) continue;
        if (owner >= (uint64_t)owner_count) {
            PyErr_Format(PyExc_ValueError, "slot %d has owner %u, outside the %zd permits",
                         (int)slot, owner, owner_count);
            goto done;
        }
        if (left[owner] <= 0) continue;
        left[owner]--;
        if (start[owner]++ == 0) groups++; /* counts for now; starts below */
        sent_to[i] = owner;
        sent++;
    }
    Py_ssize_t *position_data, *owner_data, *bound_data;
    positions = new_intp_array(sent, &position_data);
    owners = new_intp_array(groups, &owner_data);
    bounds = new_intp_array(groups + 1, &bound_data);
    if (positions == NULL || owners == NULL || bounds == NULL) goto done;
    Py_ssize_t group = 0, at = 0;
    bound_data[0] = 0;
    for (Py_ssize_t owner = 1; owner < owner_count; owner++) { /* counts become starts */
        Py_ssize_t count = start[owner];
        if (count == 0) continue;
        owner_data[group] = owner;
        start[owner] = at;
        at += count;
        bound_data[++group] = at;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (sent_to[i]) position_data[start[sent_to[i]]++] = i;
    }
    result = PyTuple_Pack(3, positions, owners, bounds);
done:
    Py_XDECREF(positions);
    Py_XDECREF(owners);
    Py_XDECREF(bounds);
    PyMem_Free(left);
    PyMem_Free(sent_to);
    PyMem_Free(start);
    return result;
}

/* plan(slots, owner_of_slot, flags, permits, blocking) -> (positions, owners, bounds) */
static PyObject *plan(PyObject *self, PyObject *args) {
    PyObject *slots_obj, *owners_obj, *flags_obj, *permits_obj, *result = NULL;
    unsigned int blocking;
    Py_buffer slots, owners, flags, permits;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOI", &slots_obj, &owners_obj, &flags_obj, &permits_obj,
                          &blocking)) {
        return NULL;
    }
    slots.obj = owners.obj = flags.obj = permits.obj = NULL;
    if (get_array(slots_obj, &slots, 4, "i", NULL, "slots") &&
        get_array(owners_obj, &owners, 4, "I", NULL, "owner_of_slot") &&
        get_array(flags_obj, &flags, 1, "B", NULL, "flags") &&
        get_array(permits_obj, &permits, 8, "l", "q", "permits")) {
        if (flags.len < owners.len / 4) {
            PyErr_SetString(PyExc_ValueError, "flags must cover every slot of the owner table");
        } else {
            result = planned(slots.buf, slots.len / 4, owners.buf, owners.len / 4, flags.buf,
                             permits.buf, permits.len / 8, blocking);
        }
    }
    if (slots.obj != NULL) PyBuffer_Release(&slots);
    if (owners.obj != NULL) PyBuffer_Release(&owners);
    if (flags.obj != NULL) PyBuffer_Release(&flags);
    if (permits.obj != NULL) PyBuffer_Release(&permits);
    return result;
}

static PyMethodDef METHODS[] = {
    {"plan", plan, METH_VARARGS,
     "plan(slots, owner_of_slot, flags, permits, blocking) -> (positions, owners, bounds)\n\n"
     "The Key_Shared plan of dispatch.plan_keyed (int32 slots, uint32 owner table, uint8\n"
     "flags, int64 permits per owner index) as three bytearrays of intp."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_keyed_plan",
    "The Key_Shared plan of a dispatch round in C (see _keyed_plan.c).", -1, METHODS,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__keyed_plan(void) { return versioned_module(&MODULE, PLAN_VERSION); }
