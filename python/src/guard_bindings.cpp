// _kiln.guards: guard sets built from Python, frame states, described calls,
// compiled guard programs over the Python front end (guard_frontend.h) and
// the per-function cache of entries. The checks that run on every call
// (`GuardProgram.checker()`, `FunctionCache.lookup_function()`) are plain
// METH_FASTCALL functions, so a call costs no pybind11 dispatch (and CPython
// 3.11+ calls them straight from its interpreter loop).
#include "guard_bindings.h"

#include "sym_operators.h"

#include <pybind11/stl.h>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "guard_frontend.h"
#include "kiln/common/error.h"
#include "kiln/guards/frame_state.h"
#include "kiln/guards/input_frontend.h"
#include "kiln/guards/wire.h"
#include "kiln/sym/print.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

using namespace kiln::guards;

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message);
}


struct PyCallInput {
  CallInput call;
};

sym::Expr exprOf(const GuardSym& like, py::handle h) {
  if (py::isinstance<GuardSym>(h)) {
    const GuardSym& s = h.cast<const GuardSym&>();
    if (s.owner != like.owner) invalid("a symbol of another guard set");
    return s.expr;
  }
  if (py::isinstance<py::int_>(h) && !py::isinstance<py::bool_>(h))
    return like.owner->table().integer(h.cast<int64_t>());
  invalid("expected an int or a guard symbol, got " + std::string(py::repr(h)));
}

DType dtypeFrom(py::handle h) {
  std::string name = py::str(h);
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (name == "float") name = "float32";
  if (name == "double") name = "float64";
  if (name == "half") name = "float16";
  if (name == "long") name = "int64";
  if (name == "int") name = "int32";
  for (int32_t i = 0; i < kDTypeCount; ++i)
    if (dtypeName(static_cast<DType>(i)) == name) return static_cast<DType>(i);
  invalid("unknown dtype '" + name + "'");
}

ir::Device deviceFrom(const std::string& device) {
  if (device == "cpu") return {};
  if (device == "cuda") return {ir::DeviceType::Cuda, -1};
  if (device.rfind("cuda:", 0) == 0)
    return {ir::DeviceType::Cuda, static_cast<int16_t>(std::stoi(device.substr(5)))};
  invalid("unknown device '" + device + "'");
}

TypeRef typeRefFrom(py::handle h) {
  if (PyType_Check(h.ptr())) return typeRefOf(reinterpret_cast<PyTypeObject*>(h.ptr()));
  if (py::isinstance<py::tuple>(h) && py::len(h) == 2)
    return {py::str(h[py::int_(0)]), py::str(h[py::int_(1)])};
  invalid("a type is a class or a (module, qualname) tuple, got " + std::string(py::repr(h)));
}

Constant constantOf(py::handle h) {
  auto c = constantFrom(h.ptr());
  if (!c)
    invalid("not a constant (None, bool, int, float, str or a tuple of them): " +
            std::string(py::repr(h)));
  return *c;
}

// A step: ("arg", 0, "x"), ("kwarg", "y"), ("global", "g"), ("closure", 0, "c"),
// ("attr", "w"), ("index", 3), ("key", "k"), ("int_key", 3), ("size", 0), ("stride", 1),
// ("default", 0), ("kw_default", "k"), ("has_attr", "w"), ("module", "math"), ("class_attr", 0, "forward").
Step stepFrom(py::handle h) {
  if (!py::isinstance<py::tuple>(h) || py::len(h) < 2)
    invalid("a step is a tuple such as ('attr', 'weight')");
  py::tuple t = py::reinterpret_borrow<py::tuple>(h);
  const std::string kind = py::str(t[0]);
  auto name = [&](size_t at) { return t.size() > at ? t[at].cast<std::string>() : std::string(); };
  if (kind == "arg") return arg(t[1].cast<uint32_t>(), name(2));
  if (kind == "kwarg") return kwarg(name(1));
  if (kind == "global") return global(name(1));
  if (kind == "closure") return closure(t[1].cast<uint32_t>(), name(2));
  if (kind == "attr") return attr(name(1));
  if (kind == "index") return item(t[1].cast<int64_t>());
  if (kind == "key") return key(name(1));
  if (kind == "int_key") return intKey(t[1].cast<int64_t>());
  if (kind == "size") return size(t[1].cast<uint32_t>());
  if (kind == "stride") return stride(t[1].cast<uint32_t>());
  if (kind == "default") return defaultArg(t[1].cast<uint32_t>());
  if (kind == "kw_default") return kwDefault(name(1));
  if (kind == "has_attr") return hasAttr(name(1));
  if (kind == "module") return pyModule(name(1));
  if (kind == "class_attr") return classAttr(t[1].cast<uint32_t>(), name(2));
  invalid("unknown step kind '" + kind + "'");
}

py::bytes frameBytes(const FrameState& frame) {
  capnp::MallocMessageBuilder message;
  toWire(frame, message.initRoot<schema::FrameState>());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return py::bytes(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

FrameState frameFromBytes(const std::string& bytes) {
  if (bytes.size() % sizeof(capnp::word) != 0)
    throw Error(ErrorCode::Malformed, "frame state: not whole words");
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  try {
    capnp::FlatArrayMessageReader reader(words);
    return fromWire(reader.getRoot<schema::FrameState>());
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::Malformed, "frame state: " + std::string(e.getDescription().cStr()));
  }
}

PyObject* kwargsOrNull(PyObject* kwargs) {
  if (!kwargs || kwargs == Py_None) return nullptr;
  if (!PyDict_Check(kwargs)) {
    PyErr_SetString(PyExc_TypeError, "kwargs must be a dict or None");
    return reinterpret_cast<PyObject*>(-1);
  }
  return kwargs;
}

// ---- fast functions: METH_FASTCALL over a small object holding the C++ one ----

// The `self` of a fast function: the C++ object it runs on, one load away.
struct FastTarget {
  PyObject_HEAD void* target;
  std::shared_ptr<void>* keep;
};

void deallocFastTarget(PyObject* o) {
  PyTypeObject* type = Py_TYPE(o);
  delete reinterpret_cast<FastTarget*>(o)->keep;
  type->tp_free(o);
  Py_DECREF(type);
}

PyTypeObject* fastTargetType() {
  static PyTypeObject* type = [] {
    static PyType_Slot slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(&deallocFastTarget)},
                                  {0, nullptr}};
    static PyType_Spec spec = {"_kiln.guards.FastTarget", sizeof(FastTarget), 0, Py_TPFLAGS_DEFAULT,
                               slots};
    PyObject* t = PyType_FromSpec(&spec);
    if (!t) throw py::error_already_set();
    return reinterpret_cast<PyTypeObject*>(t); // kept for the process's life
  }();
  return type;
}

template <class T> T* targetOf(PyObject* self) {
  return static_cast<T*>(reinterpret_cast<FastTarget*>(self)->target);
}

template <class T> py::object fastFunction(PyMethodDef* def, std::shared_ptr<T> target) {
  FastTarget* self = PyObject_New(FastTarget, fastTargetType());
  if (!self) throw py::error_already_set();
  self->target = target.get();
  self->keep = new std::shared_ptr<void>(std::move(target));
  PyObject* f = PyCFunction_NewEx(def, reinterpret_cast<PyObject*>(self), nullptr);
  Py_DECREF(self);
  if (!f) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(f);
}

struct NativeProgram {
  std::shared_ptr<LoadedProgram> program;
  std::string text;
  RunScratch scratch;
};

PyObject* programCheck(PyObject* self, PyObject* const* argv, Py_ssize_t n) {
  if (n < 2 || n > 3 || !PyTuple_Check(argv[1])) {
    PyErr_SetString(PyExc_TypeError, "check(fn, args: tuple, kwargs: dict | None = None)");
    return nullptr;
  }
  PyObject* kwargs = kwargsOrNull(n == 3 ? argv[2] : nullptr);
  if (kwargs == reinterpret_cast<PyObject*>(-1)) return nullptr;
  NativeProgram* p = targetOf<NativeProgram>(self);
  try {
    return PyBool_FromLong(passes(*p->program, argv[0], argv[1], kwargs, p->scratch));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyMethodDef kProgramCheck = {
    "check", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(programCheck)),
    METH_FASTCALL, "check(fn, args, kwargs=None) -> bool: the guards hold of this call."};

// The compiled entries of one function, checked in order on every call.
struct NativeCache {
  struct Entry {
    uint64_t id = 0;
    std::shared_ptr<LoadedProgram> program;
    std::string text; // the guard set's text
    py::object value;
  };
  py::object function; // a weak reference to it
  std::vector<Entry> entries;
  std::vector<std::pair<uint64_t, std::string>> reasons; // of the last miss
  RunScratch scratch;
  int lookups = 0;            // > 0 while a lookup runs (entries must not change then)
  bool readsFunction = false; // an entry reads the function (its globals, cells, defaults)

  PyObject* fn() const {
    PyObject* f = PyWeakref_GET_OBJECT(function.ptr());
    return f == Py_None ? nullptr : f;
  }
  void mutable_() const {
    if (lookups > 0)
      throw Error(ErrorCode::InvalidArgument, "function cache changed during its own lookup");
  }
};

PyObject* cacheLookup(PyObject* self, PyObject* const* argv, Py_ssize_t n) {
  if (n < 1 || n > 2 || !PyTuple_Check(argv[0])) {
    PyErr_SetString(PyExc_TypeError, "lookup(args: tuple, kwargs: dict | None = None)");
    return nullptr;
  }
  PyObject* kwargs = kwargsOrNull(n == 2 ? argv[1] : nullptr);
  if (kwargs == reinterpret_cast<PyObject*>(-1)) return nullptr;
  NativeCache* c = targetOf<NativeCache>(self);
  ++c->lookups;
  struct Leave {
    int& n;
    ~Leave() { --n; }
  } leave{c->lookups};
  try {
    PyObject* fn = c->readsFunction ? c->fn() : nullptr;
    GlobalBits globals; // read once for every entry
    for (const NativeCache::Entry& e : c->entries)
      if (passes(*e.program, fn, argv[0], kwargs, c->scratch, &globals))
        return Py_NewRef(e.value.ptr());
    fn = c->fn();
    c->reasons.clear();
    for (const NativeCache::Entry& e : c->entries) {
      auto why = explainCall(*e.program, fn, argv[0], kwargs);
      c->reasons.emplace_back(
          e.id, why ? *why : "held on a second look (the call changed while it was checked)");
    }
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyMethodDef kCacheLookup = {
    "lookup", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(cacheLookup)),
    METH_FASTCALL,
    "lookup(args, kwargs=None): the value of the first entry whose guards hold, or None."};

std::shared_ptr<LoadedProgram> load(py::handle guardsOrBytes, std::string* text) {
  if (py::isinstance<PyGuardSet>(guardsOrBytes)) {
    const GuardSet& set = *guardsOrBytes.cast<const PyGuardSet&>().set;
    if (text) *text = set.text();
    return std::make_shared<LoadedProgram>(compile(set));
  }
  if (py::isinstance<py::bytes>(guardsOrBytes)) {
    std::string bytes = guardsOrBytes.cast<std::string>();
    GuardSet set = guardSetFromBytes(bytes);
    if (text) *text = set.text();
    return std::make_shared<LoadedProgram>(compile(set));
  }
  invalid("expected a GuardSet or its bytes, got " + std::string(py::repr(guardsOrBytes)));
}

PyObject* kwargsHandle(const py::object& kwargs) {
  if (kwargs.is_none()) return nullptr;
  if (!PyDict_Check(kwargs.ptr())) invalid("kwargs must be a dict or None");
  return kwargs.ptr();
}

std::vector<std::string> namesOf(const py::object& names) {
  return names.is_none() ? std::vector<std::string>{} : names.cast<std::vector<std::string>>();
}

CallInput describeArgs(const py::tuple& args, const py::object& kwargs) {
  return describeCall(nullptr, args.ptr(), kwargsHandle(kwargs));
}

void bindSym(py::module_& m) {
  using F = sym::Expr (*)(sym::Expr, sym::Expr);
  auto make = [](const GuardSym& a, sym::Expr e) { return GuardSym{a.owner, e}; };
  auto other = [](const GuardSym& a, py::handle b) { return exprOf(a, b); };
  auto binary = [=](F f) { return symBinary<GuardSym>(make, other, f); };
  F eq = [](sym::Expr a, sym::Expr b) { return sym::eq(a, b); };
  F ne = [](sym::Expr a, sym::Expr b) { return sym::ne(a, b); };
  F lt = [](sym::Expr a, sym::Expr b) { return sym::lt(a, b); };
  F le = [](sym::Expr a, sym::Expr b) { return sym::le(a, b); };
  F gt = [](sym::Expr a, sym::Expr b) { return sym::gt(a, b); };
  F ge = [](sym::Expr a, sym::Expr b) { return sym::ge(a, b); };
  F both = [](sym::Expr a, sym::Expr b) { return sym::logicalAnd(a, b); };
  F either = [](sym::Expr a, sym::Expr b) { return sym::logicalOr(a, b); };
  py::class_<GuardSym> cls(m, "Sym",
                           "A symbolic int of one guard set; comparisons make shape guards.");
  defSymArithmetic(cls, make, other);
  cls.def("__eq__", binary(eq))
      .def("__ne__", binary(ne))
      .def("__lt__", binary(lt))
      .def("__le__", binary(le))
      .def("__gt__", binary(gt))
      .def("__ge__", binary(ge))
      .def("__and__", binary(both))
      .def("__or__", binary(either))
      .def("__invert__",
           [](const GuardSym& a) {
             return GuardSym{a.owner, sym::logicalNot(a.expr)};
           })
      .def("__str__", [](const GuardSym& a) { return sym::toString(a.expr); })
      .def("__repr__", [](const GuardSym& a) { return "Sym(" + sym::toString(a.expr) + ")"; });
}

void bindGuardSet(py::module_& m) {
  py::class_<PyGuardSet>(m, "GuardSet")
      .def(py::init<>())
      .def(
          "node",
          [](PyGuardSet& s, int32_t parent, py::handle step) {
            return s.set->node(parent, stepFrom(step));
          },
          py::arg("parent"), py::arg("step"))
      .def("path",
           [](PyGuardSet& s, const py::args& steps) {
             std::vector<Step> path;
             for (py::handle h : steps) path.push_back(stepFrom(h));
             return s.set->path(path);
           })
      .def("source", [](const PyGuardSet& s, uint32_t node) { return s.set->source(node); })
      .def(
          "expect_call",
          [](PyGuardSet& s, uint32_t positional, std::vector<std::string> keywords) {
            std::sort(keywords.begin(), keywords.end());
            s.set->call = {positional, std::move(keywords)};
          },
          py::arg("positional"), py::arg("keywords") = std::vector<std::string>{})
      .def("check_type", [](PyGuardSet& s, uint32_t node,
                            py::handle type) { s.set->check(node, typeIs(typeRefFrom(type))); })
      .def(
          "check_identity",
          [](PyGuardSet& s, uint32_t node, py::handle obj, std::optional<std::string> label) {
            std::string l = label ? *label : "<" + typeRefOf(Py_TYPE(obj.ptr())).text() + ">";
            s.set->check(node,
                         identityIs({reinterpret_cast<uintptr_t>(obj.ptr()), guardScope(), l}));
          },
          py::arg("node"), py::arg("obj"), py::arg("label") = py::none())
      .def("check_equals", [](PyGuardSet& s, uint32_t node,
                              py::handle v) { s.set->check(node, equals(constantOf(v))); })
      .def("check_length",
           [](PyGuardSet& s, uint32_t node, uint64_t n) { s.set->check(node, lengthIs(n)); })
      .def(
          "check_dict_keys",
          [](PyGuardSet& s, uint32_t node, const py::iterable& keys, bool ordered) {
            std::vector<Constant> out;
            for (py::handle k : keys) out.push_back(constantOf(k));
            s.set->check(node, dictKeysAre(std::move(out), ordered));
          },
          py::arg("node"), py::arg("keys"), py::arg("ordered") = false)
      .def(
          "check_tensor",
          [](PyGuardSet& s, uint32_t node, py::handle dtype, std::vector<StaticInt> sizes,
             std::vector<StaticInt> strides, const std::string& device, bool requiresGrad,
             StaticInt storageOffset) {
            TensorCheck t;
            t.dtype = dtypeFrom(dtype);
            t.device = deviceFrom(device);
            t.requiresGrad = requiresGrad;
            t.sizes = std::move(sizes);
            t.strides = std::move(strides);
            t.storageOffset = storageOffset;
            s.set->check(node, tensorMatches(std::move(t)));
          },
          py::arg("node"), py::arg("dtype"), py::arg("sizes"), py::arg("strides"),
          py::arg("device") = "cpu", py::arg("requires_grad") = false,
          py::arg("storage_offset") = 0)
      .def(
          "guard_globals",
          [](PyGuardSet& s, std::optional<bool> grad, py::object dtype,
             std::optional<bool> deterministic,
             std::optional<std::vector<std::tuple<std::string, bool, py::object>>> autocast) {
            if (grad) s.set->globals.gradEnabled = grad;
            if (!dtype.is_none()) s.set->globals.defaultDtype = dtypeFrom(dtype);
            if (deterministic) s.set->globals.deterministic = deterministic;
            if (autocast) {
              s.set->globals.autocast.clear();
              for (auto& [device, enabled, adtype] : *autocast)
                s.set->globals.autocast.push_back(
                    {deviceFrom(device).type, enabled,
                     adtype.is_none() ? DType::BFloat16 : dtypeFrom(adtype)});
            }
          },
          py::arg("grad_enabled") = py::none(), py::arg("default_dtype") = py::none(),
          py::arg("deterministic") = py::none(), py::arg("autocast") = py::none())
      .def("guard_current_globals", [](PyGuardSet& s) { s.set->globals = currentGlobalState(); })
      .def("symbol",
           [](PyGuardSet& s, const std::string& name, uint32_t node) {
             return GuardSym{s.set, s.set->symbol(name, node)};
           })
      .def("shape_guard",
           [](PyGuardSet& s, const GuardSym& relation) {
             if (relation.owner != s.set) invalid("a relation over another guard set's symbols");
             s.set->shapeGuard(relation.expr);
           })
      .def_property_readonly("positional",
                             [](const PyGuardSet& s) { return s.set->call.positional; })
      .def_property_readonly("keywords", [](const PyGuardSet& s) { return s.set->call.keywords; })
      .def_property_readonly("node_count",
                             [](const PyGuardSet& s) { return s.set->nodes().size(); })
      .def("text", [](const PyGuardSet& s) { return s.set->text(); })
      .def("__str__", [](const PyGuardSet& s) { return s.set->text(); })
      .def("to_bytes", [](const PyGuardSet& s) { return py::bytes(toBytes(*s.set)); })
      .def_static("from_bytes", [](const py::bytes& b) {
        PyGuardSet s;
        *s.set = guardSetFromBytes(std::string(b));
        return s;
      });
}

void bindCalls(py::module_& m) {
  py::class_<PyCallInput>(m, "CallInput", "A call described for the C++ front end (the slow path).")
      .def("to_bytes", [](const PyCallInput& c) { return py::bytes(toBytes(c.call)); })
      .def_static(
          "from_bytes",
          [](const py::bytes& b) { return PyCallInput{callInputFromBytes(std::string(b))}; })
      .def_property_readonly("scope", [](const PyCallInput& c) { return c.call.scope; });

  m.def(
      "describe_call",
      [](py::object fn, const py::tuple& args, const py::object& kwargs) {
        return PyCallInput{
            describeCall(fn.is_none() ? nullptr : fn.ptr(), args.ptr(), kwargsHandle(kwargs))};
      },
      py::arg("fn"), py::arg("args"), py::arg("kwargs") = py::none());

  py::class_<FrameState>(m, "FrameState",
                         "What a function's calls showed of their sizes (automatic dynamic).")
      .def(py::init<>())
      .def(
          "observe",
          [](FrameState& f, const py::tuple& args, const py::object& kwargs,
             const py::object& names) {
            return f.observe(guards::observe(describeArgs(args, kwargs), namesOf(names)));
          },
          py::arg("args"), py::arg("kwargs") = py::none(), py::arg("arg_names") = py::none(),
          "Records what this call saw; True when a decision changed (a size or int turned "
          "dynamic).")
      .def("dynamic_dim", &FrameState::dynamicDim, py::arg("source"), py::arg("dim"))
      .def("dynamic_int", &FrameState::dynamicInt, py::arg("source"))
      .def("dynamic_float", &FrameState::dynamicFloat, py::arg("source"))
      .def("mark", &FrameState::mark, py::arg("dim"), py::arg("dynamic"),
           "mark_dynamic (dynamic=True) or mark_static of \"L['x'].size()[0]\" or \"L['n']\".")
      .def("copy", [](const FrameState& f) { return FrameState(f); })
      .def("to_bytes", &frameBytes, "The wire form (schemas/guards.capnp FrameState).")
      .def_static("from_bytes", [](const py::bytes& b) { return frameFromBytes(std::string(b)); })
      .def("text", &FrameState::text)
      .def("__str__", &FrameState::text);

  m.def(
      "observe_call",
      [](const py::tuple& args, const py::object& kwargs, const py::object& names) {
        py::list out;
        for (const FrameInput& in : guards::observe(describeArgs(args, kwargs), namesOf(names)))
          out.append(in.source);
        return out;
      },
      py::arg("args"), py::arg("kwargs") = py::none(), py::arg("arg_names") = py::none());

  m.def(
      "guards_for_call",
      [](const py::tuple& args, const py::object& kwargs, const py::object& names,
         const FrameState& frame) {
        PyGuardSet s;
        *s.set = guardsForCall(describeArgs(args, kwargs), namesOf(names), frame);
        return s;
      },
      py::arg("args"), py::arg("kwargs"), py::arg("arg_names"), py::arg("frame_state"));

  m.def("scope", &guardScope,
        "This process's scope token (identity guards hold only in their process).");
  m.def("global_state", [] {
    GuardSet s;
    s.globals = currentGlobalState();
    return s.text();
  });
}

void bindProgram(py::module_& m) {
  py::class_<NativeProgram, std::shared_ptr<NativeProgram>>(m, "GuardProgram")
      .def(py::init([](py::handle guards) {
             auto p = std::make_shared<NativeProgram>();
             p->program = load(guards, &p->text);
             return p;
           }),
           py::arg("guards"))
      .def("checker",
           [](const std::shared_ptr<NativeProgram>& p) { return fastFunction(&kProgramCheck, p); })
      .def(
          "explain",
          [](NativeProgram& p, py::object fn, const py::tuple& args, const py::object& kwargs) {
            return explainCall(*p.program, fn.is_none() ? nullptr : fn.ptr(), args.ptr(),
                               kwargsHandle(kwargs));
          },
          py::arg("fn"), py::arg("args"), py::arg("kwargs") = py::none())
      .def("explain_input",
           [](NativeProgram& p, const PyCallInput& call) {
             return firstFailure(p.program->program(), call.call);
           })
      .def_property_readonly("text", [](const NativeProgram& p) { return p.text; })
      .def_property_readonly(
          "instructions", [](const NativeProgram& p) { return p.program->program().code.size(); });

  py::class_<NativeCache, std::shared_ptr<NativeCache>>(m, "FunctionCacheNative")
      .def(py::init([](py::handle fn) {
        auto c = std::make_shared<NativeCache>();
        c->function = py::reinterpret_steal<py::object>(PyWeakref_NewRef(fn.ptr(), nullptr));
        if (!c->function) throw py::error_already_set();
        return c;
      }))
      .def("lookup_function",
           [](const std::shared_ptr<NativeCache>& c) { return fastFunction(&kCacheLookup, c); })
      .def(
          "add",
          [](NativeCache& c, uint64_t id, py::handle guards, py::object value) {
            c.mutable_();
            NativeCache::Entry e;
            e.id = id;
            e.program = load(guards, &e.text);
            e.value = std::move(value);
            c.readsFunction |= e.program->readsFunction();
            c.entries.push_back(std::move(e));
          },
          py::arg("id"), py::arg("guards"), py::arg("value"))
      .def("clear",
           [](NativeCache& c) {
             c.mutable_();
             c.entries.clear();
             c.reasons.clear();
             c.readsFunction = false;
           })
      .def("__len__", [](const NativeCache& c) { return c.entries.size(); })
      .def_property_readonly("ids",
                             [](const NativeCache& c) {
                               std::vector<uint64_t> out;
                               for (const auto& e : c.entries) out.push_back(e.id);
                               return out;
                             })
      .def("text", [](const NativeCache& c, size_t at) { return c.entries.at(at).text; })
      .def_property_readonly("last_reasons", [](const NativeCache& c) { return c.reasons; })
      .def(
          "explain",
          [](NativeCache& c, const py::tuple& args, const py::object& kwargs) {
            std::vector<std::pair<uint64_t, std::optional<std::string>>> out;
            for (const auto& e : c.entries)
              out.emplace_back(e.id,
                               explainCall(*e.program, c.fn(), args.ptr(), kwargsHandle(kwargs)));
            return out;
          },
          py::arg("args"), py::arg("kwargs") = py::none());
}

} // namespace

guards::CallInput describePythonCall(py::handle fn, py::handle args, py::handle kwargs) {
  if (!PyTuple_Check(args.ptr())) invalid("args must be a tuple");
  return describeCall(fn.is_none() ? nullptr : fn.ptr(), args.ptr(),
                      kwargsHandle(py::reinterpret_borrow<py::object>(kwargs)));
}

void bindGuards(py::module_& m) {
  py::module_ g =
      m.def_submodule("guards", "The guard VM's Python front end and guard sets; use kiln.guards.");
  bindSym(g);
  bindGuardSet(g);
  bindCalls(g);
  bindProgram(g);
}

} // namespace kiln::python
