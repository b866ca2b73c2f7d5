/* What the broker's native modules (_record_cut.c, _keyed_plan.c) share: reading an
 * array argument without copying it, and a module that carries the version of its C
 * source (broker/native.py refuses a module built from another version). */

#ifndef KEYBUS_NATIVE_H
#define KEYBUS_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* `obj` as a contiguous buffer of `itemsize`-byte items of buffer format `format` (or
 * `alternative`, when not NULL); 0 with TypeError set, and `view->obj` NULL, otherwise. */
static int get_array(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *format,
                     const char *alternative, const char *what) {
    view->obj = NULL;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return 0;
    if (view->itemsize != itemsize || view->format == NULL ||
        (strcmp(view->format, format) != 0 &&
         (alternative == NULL || strcmp(view->format, alternative) != 0))) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous array of format %s", what,
                     format);
        return 0;
    }
    return 1;
}

/* The module of `def`, with its VERSION constant set to `version`. */
static PyObject *versioned_module(struct PyModuleDef *def, int version) {
    PyObject *module = PyModule_Create(def);
    if (module != NULL && PyModule_AddIntConstant(module, "VERSION", version) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

#endif
