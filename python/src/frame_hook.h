// The frame-evaluation hook (PEP 523) that offers the frames a compiled function's eager
// parts call to kiln: see frame_hook.c.
#pragma once

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

// Adds call_offering() and offering() to `module`; -1 with a Python error set on failure.
int kiln_frame_hook_init(PyObject* module);

#ifdef __cplusplus
}
#endif
