/* The frame-evaluation hook (PEP 523): while a compiled function runs Python eagerly (the
 * eager part of a graph break, a fallback), each Python frame it calls is offered to kiln,
 * which may run that call compiled instead.
 *
 * A thread turns offering on with `call_offering(callback, skip, fn, args, kwargs[, target])`:
 * for the extent of that call, each new frame of a function is handed to `callback(function,
 * args, kwargs)` before it runs (frames of `target`, a code object, even where their code is
 * marked not to be), and the answer decides:
 *   (result,)  kiln ran the call (compiled): the frame returns `result` without running
 *   None       this call runs as it is; the frames it calls are offered in turn
 *   False      never offer this code again (torch's, the standard library's, kiln's own)
 *   ...        (Ellipsis) this code and everything it calls run with offering off (kiln.disable)
 * While the callback runs, offering is off: kiln's own machinery is never offered. `skip` is a
 * code object whose first frame is not offered (the function kiln falls back to, already
 * decided). Code kiln need not see (generators, class bodies, frames with a frame object
 * already) runs as it is. The answer per code (False, ...) lives in the code object's extra
 * slot, so a skipped frame costs a pointer read.
 *
 * Written in C against CPython's internal frame layout (3.11 and 3.12), as a C++ translation
 * unit cannot include those headers. In 3.12 the evaluation function, not its caller, clears
 * and pops the frame: a frame kiln ran is cleared here. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#define KILN_FRAME_HOOK 1
#else
#define KILN_FRAME_HOOK 0
#endif

#if KILN_FRAME_HOOK

#if PY_VERSION_HEX >= 0x030C0000
#define FRAME_FUNCTION(frame) ((frame)->f_funcobj)
#define CODE_GET_EXTRA PyUnstable_Code_GetExtra
#define CODE_SET_EXTRA PyUnstable_Code_SetExtra
#define REQUEST_CODE_EXTRA_INDEX PyUnstable_Eval_RequestCodeExtraIndex
#else
#define CODE_GET_EXTRA _PyCode_GetExtra
#define CODE_SET_EXTRA _PyCode_SetExtra
#define REQUEST_CODE_EXTRA_INDEX _PyEval_RequestCodeExtraIndex
#define FRAME_FUNCTION(frame) ((PyObject *)(frame)->f_func)
#endif

/* What the code's extra slot says: nothing yet, run as is, or run with offering off. */
#define CODE_SKIP ((void *)1)
#define CODE_DISABLED ((void *)2)

static __thread PyObject *offer_callback;  /* strong reference; NULL: offering off */
static __thread PyObject *skip_code;       /* borrowed, compared only */
static __thread PyObject *target_code;     /* borrowed, compared only */
static int offering_threads;               /* threads with a callback set (under the GIL) */
static Py_ssize_t extra_index = -1;

static PyObject *kiln_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throw_flag);

/* Installs the hook while any thread offers; another hook already installed (a debugger's,
 * torch.compile's) is left alone, and frames are then not offered. */
static void count_thread(int delta) {
  PyInterpreterState *interp = PyInterpreterState_Get();
  offering_threads += delta;
  _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  int ours_or_default = current == kiln_eval_frame || current == _PyEval_EvalFrameDefault;
  if (ours_or_default) _PyInterpreterState_SetEvalFrameFunc(interp, offering_threads > 0 ? kiln_eval_frame : NULL);
}

/* The frame's arguments as a call would pass them: positional (with *args spread) and
 * keyword-only (with **kwargs merged). At this point the frame holds exactly its arguments. */
static int frame_arguments(_PyInterpreterFrame *frame, PyObject **args, PyObject **kwargs) {
  PyCodeObject *code = frame->f_code;
  PyObject **slots = frame->localsplus;
  int positional = code->co_argcount, keyword_only = code->co_kwonlyargcount;
  int next = positional + keyword_only;
  PyObject *varargs = (code->co_flags & CO_VARARGS) ? slots[next++] : NULL;
  PyObject *varkw = (code->co_flags & CO_VARKEYWORDS) ? slots[next++] : NULL;
  for (int i = 0; i < next; i++)
    if (slots[i] == NULL) return 0;
  Py_ssize_t extra = varargs != NULL ? PyTuple_GET_SIZE(varargs) : 0;
  *args = PyTuple_New(positional + extra);
  *kwargs = PyDict_New();
  if (*args == NULL || *kwargs == NULL) goto failed;
  for (int i = 0; i < positional; i++) PyTuple_SET_ITEM(*args, i, Py_NewRef(slots[i]));
  for (Py_ssize_t i = 0; i < extra; i++)
    PyTuple_SET_ITEM(*args, positional + i, Py_NewRef(PyTuple_GET_ITEM(varargs, i)));
  for (int i = positional; i < positional + keyword_only; i++)
    if (PyDict_SetItem(*kwargs, PyTuple_GET_ITEM(code->co_localsplusnames, i), slots[i]) < 0) goto failed;
  if (varkw != NULL && PyDict_Update(*kwargs, varkw) < 0) goto failed;
  return 1;
failed:
  Py_CLEAR(*args);
  Py_CLEAR(*kwargs);
  return -1;
}

/* Whether kiln may run this frame in its place: a function's own frame, fresh, on the thread's
 * stack; in 3.12 one it can pop again (not the first of a data-stack chunk). */
static int replaceable(PyThreadState *tstate, _PyInterpreterFrame *frame) {
  PyCodeObject *code = frame->f_code;
  const int fresh_function = CO_OPTIMIZED | CO_NEWLOCALS;
  const int resumable = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE;
  if ((code->co_flags & fresh_function) != fresh_function || (code->co_flags & resumable)) return 0;
  if (frame->owner != FRAME_OWNED_BY_THREAD || frame->frame_obj != NULL || frame->f_locals != NULL) return 0;
  if (FRAME_FUNCTION(frame) == NULL || !PyFunction_Check(FRAME_FUNCTION(frame))) return 0;
#if PY_VERSION_HEX >= 0x030C0000
  if ((PyObject **)frame == &tstate->datastack_chunk->data[0]) return 0;
#else
  (void)tstate;
#endif
  return 1;
}

/* A frame kiln ran in its place: 3.12 leaves clearing and popping it to the evaluation
 * function (3.11's caller does both). No frame object was made for it: it never ran. */
static void drop_frame(PyThreadState *tstate, _PyInterpreterFrame *frame) {
#if PY_VERSION_HEX >= 0x030C0000
  for (int i = 0; i < frame->stacktop; i++) Py_XDECREF(frame->localsplus[i]);
  frame->stacktop = 0;
  Py_XDECREF(frame->f_locals);
  Py_DECREF(frame->f_funcobj);
  Py_DECREF(frame->f_code);
  tstate->datastack_top = (PyObject **)frame;
#else
  (void)tstate;
  (void)frame;
#endif
}

static PyObject *eval_without_offering(PyThreadState *tstate, _PyInterpreterFrame *frame, int throw_flag) {
  PyObject *callback = offer_callback;
  offer_callback = NULL;
  PyObject *result = _PyEval_EvalFrameDefault(tstate, frame, throw_flag);
  if (offer_callback == NULL) offer_callback = callback;
  else Py_DECREF(callback);
  return result;
}

static PyObject *kiln_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throw_flag) {
  PyObject *callback = offer_callback;
  if (callback == NULL || throw_flag) return _PyEval_EvalFrameDefault(tstate, frame, throw_flag);
  PyObject *code = (PyObject *)frame->f_code;
  if (code == skip_code) {
    skip_code = NULL;
    return _PyEval_EvalFrameDefault(tstate, frame, throw_flag);
  }
  void *decided = NULL;
  if (code != target_code && CODE_GET_EXTRA(code, extra_index, &decided) < 0) return NULL;
  if (decided == CODE_SKIP || !replaceable(tstate, frame)) return _PyEval_EvalFrameDefault(tstate, frame, throw_flag);
  if (decided == CODE_DISABLED) return eval_without_offering(tstate, frame, throw_flag);

  PyObject *args = NULL, *kwargs = NULL;
  int have = frame_arguments(frame, &args, &kwargs);
  if (have < 0) return NULL;
  if (have == 0) return _PyEval_EvalFrameDefault(tstate, frame, throw_flag);
  offer_callback = NULL;  /* kiln's machinery is never offered */
  PyObject *answer = PyObject_CallFunctionObjArgs(callback, FRAME_FUNCTION(frame), args, kwargs, NULL);
  if (offer_callback == NULL) offer_callback = callback;
  else Py_DECREF(callback);
  Py_DECREF(args);
  Py_DECREF(kwargs);
  if (answer == NULL || PyTuple_Check(answer)) {
    PyObject *result = NULL;
    if (answer != NULL && PyTuple_GET_SIZE(answer) == 1) result = Py_NewRef(PyTuple_GET_ITEM(answer, 0));
    else if (answer != NULL) PyErr_SetString(PyExc_SystemError, "kiln: the frame hook's callback answered a tuple not of one");
    Py_XDECREF(answer);
    drop_frame(tstate, frame);
    return result;
  }
  int disabled = answer == Py_Ellipsis;
  if (answer == Py_False || disabled) {
    if (CODE_SET_EXTRA(code, extra_index, disabled ? CODE_DISABLED : CODE_SKIP) < 0) {
      Py_DECREF(answer);
      return NULL;
    }
  }
  Py_DECREF(answer);
  return disabled ? eval_without_offering(tstate, frame, throw_flag)
                  : _PyEval_EvalFrameDefault(tstate, frame, throw_flag);
}

/* Sets this thread's callback (a new reference, or NULL) and returns the one it replaces. */
static PyObject *swap_callback(PyObject *callback) {
  PyObject *old = offer_callback;
  offer_callback = callback;
  if ((old == NULL) != (callback == NULL)) count_thread(callback != NULL ? 1 : -1);
  return old;
}

static PyObject *call_offering(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
  (void)self;
  if (argc != 5 && argc != 6) {
    PyErr_SetString(PyExc_TypeError, "call_offering(callback, skip, fn, args, kwargs[, target])");
    return NULL;
  }
  PyObject *callback = argv[0] == Py_None ? NULL : argv[0];
  PyObject *skip = argv[1] == Py_None ? NULL : argv[1];
  PyObject *target = argc == 6 && argv[5] != Py_None ? argv[5] : NULL;
  if (!PyTuple_Check(argv[3]) || (argv[4] != Py_None && !PyDict_Check(argv[4]))) {
    PyErr_SetString(PyExc_TypeError, "call_offering: args must be a tuple and kwargs a dict or None");
    return NULL;
  }
  PyObject *outer_skip = skip_code, *outer_target = target_code;
  PyObject *outer_callback = swap_callback(Py_XNewRef(callback));
  skip_code = skip;
  target_code = target;
  PyObject *result = PyObject_Call(argv[2], argv[3], argv[4] == Py_None ? NULL : argv[4]);
  skip_code = outer_skip;
  target_code = outer_target;
  Py_XDECREF(swap_callback(outer_callback));
  return result;
}

static PyObject *offering(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return Py_NewRef(offer_callback != NULL ? offer_callback : Py_None);
}

static PyMethodDef frame_hook_methods[] = {
    {"call_offering", (PyCFunction)(void (*)(void))call_offering, METH_FASTCALL,
     "call_offering(callback, skip, fn, args, kwargs[, target]): fn(*args, **kwargs) with the frames it "
     "calls offered to callback (None: offered to nobody); skip: a code object whose first frame is not "
     "offered; target: a code object offered even where its code is marked never to be"},
    {"offering", offering, METH_NOARGS, "The callback this thread's frames are offered to, or None."},
    {NULL, NULL, 0, NULL}};

int kiln_frame_hook_init(PyObject *module) {
  extra_index = REQUEST_CODE_EXTRA_INDEX(NULL);
  if (extra_index < 0) {
    PyErr_SetString(PyExc_RuntimeError, "kiln: no code extra slot left for the frame hook");
    return -1;
  }
  return PyModule_AddFunctions(module, frame_hook_methods);
}

#else

int kiln_frame_hook_init(PyObject *module) {
  (void)module;
  PyErr_SetString(PyExc_ImportError, "kiln's frame hook needs CPython 3.11 or 3.12");
  return -1;
}

#endif
