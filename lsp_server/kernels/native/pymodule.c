/* An empty extension module, so that setuptools builds the kernels as lsp_server.kernels.
 * native._native with the machine's compiler. Python reaches the C API through ctypes
 * (__init__.py), never through this module. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native", "specfill's native kernels (used through ctypes).", -1, NULL,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&native_module); }
