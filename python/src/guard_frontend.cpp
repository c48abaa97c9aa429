#include "guard_frontend.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <unistd.h>
#include <unordered_set>
#include <utility>

#include "kiln/guards/input_frontend.h"

namespace kiln::python {

using guards::Check;
using guards::Constant;
using guards::Input;
using guards::StepKind;
using FastKind = LoadedProgram::FastKind;

uint64_t guardScope() {
  static const uint64_t scope = [] {
    std::random_device random;
    uint64_t s =
        (static_cast<uint64_t>(random()) << 32) ^ random() ^
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (static_cast<uint64_t>(getpid()) << 17);
    return s ? s : 1;
  }();
  return scope;
}

// kiln's dtypes and torch's, one pair each: scalarTypeOf and dtypeOf read it both ways.
constexpr std::pair<DType, c10::ScalarType> kTorchDTypes[] = {
    {DType::Float32, c10::ScalarType::Float},
    {DType::Float64, c10::ScalarType::Double},
    {DType::Float16, c10::ScalarType::Half},
    {DType::BFloat16, c10::ScalarType::BFloat16},
    {DType::Int8, c10::ScalarType::Char},
    {DType::Int16, c10::ScalarType::Short},
    {DType::Int32, c10::ScalarType::Int},
    {DType::Int64, c10::ScalarType::Long},
    {DType::UInt8, c10::ScalarType::Byte},
    {DType::Bool, c10::ScalarType::Bool},
    {DType::Complex64, c10::ScalarType::ComplexFloat},
    {DType::Complex128, c10::ScalarType::ComplexDouble},
};

int16_t scalarTypeOf(DType t) {
  for (const auto& [dtype, scalarType] : kTorchDTypes)
    if (dtype == t) return static_cast<int16_t>(scalarType);
  return -1;
}

namespace {

// nn.Module and its containers, found once torch.nn is imported.
struct TorchTypes {
  PyTypeObject* module = nullptr;     // torch.nn.Module
  PyTypeObject* moduleList = nullptr; // ModuleList, Sequential: items by index
  PyTypeObject* sequential = nullptr;
  PyTypeObject* moduleDict = nullptr; // ModuleDict: items by str key
};

TorchTypes& torchTypes() {
  static TorchTypes types;
  return types;
}

PyTypeObject* typeFrom(PyObject* module, const char* name) {
  PyObject* t = PyObject_GetAttrString(module, name);
  if (!t) {
    PyErr_Clear();
    return nullptr;
  }
  if (!PyType_Check(t)) {
    Py_DECREF(t);
    return nullptr;
  }
  return reinterpret_cast<PyTypeObject*>(t); // kept for the process's life
}

void resolveTorchTypes() {
  TorchTypes& t = torchTypes();
  if (t.module) return;
  PyObject* modules = PyImport_GetModuleDict();
  PyObject* module = PyDict_GetItemString(modules, "torch.nn.modules.module");
  PyObject* container = PyDict_GetItemString(modules, "torch.nn.modules.container");
  if (!module || !container) return;
  t.moduleList = typeFrom(container, "ModuleList");
  t.sequential = typeFrom(container, "Sequential");
  t.moduleDict = typeFrom(container, "ModuleDict");
  t.module = typeFrom(module, "Module");
}

bool isModule(PyObject* o) {
  PyTypeObject* m = torchTypes().module;
  return m && PyObject_TypeCheck(o, m);
}

bool isIndexedContainer(PyObject* o) {
  const TorchTypes& t = torchTypes();
  return (t.moduleList && PyObject_TypeCheck(o, t.moduleList)) ||
         (t.sequential && PyObject_TypeCheck(o, t.sequential));
}

bool isKeyedContainer(PyObject* o) {
  const TorchTypes& t = torchTypes();
  return t.moduleDict && PyObject_TypeCheck(o, t.moduleDict);
}

// .item() of a 0-d CPU tensor of an integral (not bool) or floating dtype, as the
// tracer describes it (guards::TensorInput::value).
std::variant<std::monostate, int64_t, double> valueOf(const at::Tensor& t) {
  if (t.dim() != 0 || !t.device().is_cpu() || t.is_complex()) return {};
  if (at::isFloatingType(t.scalar_type())) return t.item<double>();
  if (at::isIntegralType(t.scalar_type(), /*includeBool=*/false)) return t.item<int64_t>();
  return {};
}

// A new reference to that value as a Python int or float; null when there is none.
PyObject* scalarOf(const at::Tensor& t) {
  auto value = valueOf(t);
  if (auto* i = std::get_if<int64_t>(&value)) return PyLong_FromLongLong(*i);
  if (auto* d = std::get_if<double>(&value)) return PyFloat_FromDouble(*d);
  return nullptr;
}

bool isTensor(PyObject* o) {
  return THPVariableClass &&
         PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(THPVariableClass));
}

PyObject* internedName(const char* name) {
  PyObject* s = PyUnicode_InternFromString(name);
  if (!s) throw pybind11::error_already_set();
  return s;
}

PyObject* parametersName() {
  static PyObject* s = internedName("_parameters");
  return s;
}
PyObject* buffersName() {
  static PyObject* s = internedName("_buffers");
  return s;
}
PyObject* modulesName() {
  static PyObject* s = internedName("_modules");
  return s;
}

// dict[key], borrowed, or null; an error from a key's __eq__ is dropped.
inline PyObject* lookup(PyObject* dict, PyObject* key) {
  PyObject* v = PyDict_GetItemWithError(dict, key);
  if (!v && PyErr_Occurred()) PyErr_Clear();
  return v;
}

// "__builtins__", interned once (immortal: kept for the process).
PyObject* builtinsName() {
  static PyObject* name = PyUnicode_InternFromString("__builtins__");
  return name;
}

// A class's own __dict__ (a new reference; 3.12 keeps static builtin types' elsewhere).
PyObject* typeDict(PyTypeObject* t) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyType_GetDict(t);
#else
  Py_XINCREF(t->tp_dict);
  return t->tp_dict;
#endif
}

// The object's instance __dict__, borrowed, or null.
PyObject* instanceDict(PyObject* o) {
  PyObject** slot = _PyObject_GetDictPtr(o);
  if (!slot) {
    if (PyErr_Occurred()) PyErr_Clear();
    return nullptr;
  }
  return *slot && PyDict_Check(*slot) ? *slot : nullptr;
}

// A module's _modules dict (borrowed), or null.
PyObject* modulesOf(PyObject* o) {
  PyObject* dict = instanceDict(o);
  if (!dict) return nullptr;
  PyObject* modules = lookup(dict, modulesName());
  return modules && PyDict_Check(modules) ? modules : nullptr;
}

std::optional<DType> dtypeOf(c10::ScalarType t) {
  for (const auto& [dtype, scalarType] : kTorchDTypes)
    if (scalarType == t) return dtype;
  return std::nullopt;
}

c10::ScalarType autocastDtype(bool cuda) {
  return at::autocast::get_autocast_dtype(cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU);
}

std::optional<ir::Device> deviceOf(const c10::Device& d) {
  if (d.type() == c10::DeviceType::CPU) return ir::Device{ir::DeviceType::Cpu, d.index()};
  if (d.type() == c10::DeviceType::CUDA) return ir::Device{ir::DeviceType::Cuda, d.index()};
  return std::nullopt;
}

guards::Autocast autocastOf(ir::DeviceType device) {
  guards::Autocast a;
  a.device = device;
  const bool cuda = device == ir::DeviceType::Cuda;
  a.enabled =
      at::autocast::is_autocast_enabled(cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU);
  a.dtype = dtypeOf(autocastDtype(cuda)).value_or(DType::Float32);
  return a;
}

bool sameStr(PyObject* a, PyObject* b) {
  if (a == b) return true;
  if (!PyUnicode_CheckExact(a) || !PyUnicode_CheckExact(b)) return false;
  Py_ssize_t n = PyUnicode_GET_LENGTH(a);
  if (n != PyUnicode_GET_LENGTH(b) || PyUnicode_KIND(a) != PyUnicode_KIND(b)) return false;
  return std::memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b),
                     static_cast<size_t>(n) * PyUnicode_KIND(a)) == 0;
}

// Python's == with the type too, as Constant's (True is not 1, nan equals nan),
// without calling Python. `mirror` is the constant as a Python object.
bool equalsConstant(PyObject* o, const Constant& c, PyObject* mirror) {
  switch (c.value.index()) {
  case 0: return o == Py_None;
  case 1: return o == (std::get<bool>(c.value) ? Py_True : Py_False);
  case 2: {
    if (!PyLong_CheckExact(o)) return false;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) PyErr_Clear();
    return !overflow && v == std::get<int64_t>(c.value);
  }
  case 3: {
    if (!PyFloat_CheckExact(o)) return false;
    double x = PyFloat_AS_DOUBLE(o), y = std::get<double>(c.value);
    return x == y || (std::isnan(x) && std::isnan(y));
  }
  case 4: return sameStr(o, mirror);
  case 5: {
    const Constant::Tuple& items = std::get<Constant::Tuple>(c.value);
    if (!PyTuple_Check(o) || static_cast<size_t>(PyTuple_GET_SIZE(o)) != items.size()) return false;
    for (size_t k = 0; k < items.size(); ++k)
      if (!equalsConstant(PyTuple_GET_ITEM(o, k), items[k], PyTuple_GET_ITEM(mirror, k)))
        return false;
    return true;
  }
  }
  return false;
}

// A new reference to the constant as a Python object (strs interned).
PyObject* objectOf(const Constant& c) {
  struct Visitor {
    PyObject* operator()(std::monostate) const { Py_RETURN_NONE; }
    PyObject* operator()(bool b) const { return PyBool_FromLong(b); }
    PyObject* operator()(int64_t i) const { return PyLong_FromLongLong(i); }
    PyObject* operator()(double d) const { return PyFloat_FromDouble(d); }
    PyObject* operator()(const std::string& s) const {
      PyObject* str =
          PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogatepass");
      if (str) PyUnicode_InternInPlace(&str);
      return str;
    }
    PyObject* operator()(const Constant::Tuple& t) const {
      PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(t.size()));
      for (size_t k = 0; tuple && k < t.size(); ++k) {
        PyObject* item = objectOf(t[k]);
        if (!item) {
          Py_DECREF(tuple);
          return nullptr;
        }
        PyTuple_SET_ITEM(tuple, k, item);
      }
      return tuple;
    }
  };
  PyObject* o = std::visit(Visitor{}, c.value);
  if (!o) throw pybind11::error_already_set();
  return o;
}

// Builtin types that are no attribute of `builtins`.
PyTypeObject* builtinType(const std::string& qualname) {
  if (qualname == "NoneType") return Py_TYPE(Py_None);
  if (qualname == "function") return &PyFunction_Type;
  if (qualname == "method") return &PyMethod_Type;
  if (qualname == "builtin_function_or_method") return &PyCFunction_Type;
  if (qualname == "module") return &PyModule_Type;
  if (qualname == "cell") return &PyCell_Type;
  if (qualname == "code") return &PyCode_Type;
  if (qualname == "ellipsis") return Py_TYPE(Py_Ellipsis);
  if (qualname == "NotImplementedType") return Py_TYPE(Py_NotImplemented);
  return nullptr;
}

// The type object a TypeRef names (a new reference), or null and why not.
PyTypeObject* resolveType(const guards::TypeRef& ref, std::string& why) {
  if (ref.module == "builtins")
    if (PyTypeObject* t = builtinType(ref.qualname)) {
      Py_INCREF(t);
      return t;
    }
  if (ref.qualname.find("<locals>") != std::string::npos) {
    why = "the type is local to a function, so it cannot be found from its module";
    return nullptr;
  }
  PyObject* at = PyImport_ImportModule(ref.module.c_str()); // sys.modules first
  if (!at) {
    PyErr_Clear();
    why = "module " + ref.module + " cannot be imported";
    return nullptr;
  }
  size_t start = 0;
  while (start <= ref.qualname.size()) {
    size_t end = ref.qualname.find('.', start);
    if (end == std::string::npos) end = ref.qualname.size();
    PyObject* next = PyObject_GetAttrString(at, ref.qualname.substr(start, end - start).c_str());
    Py_DECREF(at);
    if (!next) {
      PyErr_Clear();
      why = "module " + ref.module + " has no " + ref.qualname;
      return nullptr;
    }
    at = next;
    start = end + 1;
  }
  if (!PyType_Check(at)) {
    Py_DECREF(at);
    why = ref.text() + " is not a type";
    return nullptr;
  }
  return reinterpret_cast<PyTypeObject*>(at);
}

// Bits of GlobalBits: grad mode, deterministic, autocast on (cpu, cuda), and
// where the dtypes sit.
constexpr uint64_t kGradBit = 1, kDeterministicBit = 2, kCpuOnBit = 4, kCudaOnBit = 8;
constexpr int kDefaultDtypeShift = 8, kCpuDtypeShift = 16, kCudaDtypeShift = 24;

uint64_t dtypeBits(int16_t scalarType, int shift) {
  return (static_cast<uint64_t>(scalarType) & 0xff) << shift;
}

LoadedProgram::GlobalsAux packGlobals(const guards::GlobalState& e) {
  LoadedProgram::GlobalsAux g;
  auto expect = [&](uint32_t group, uint64_t mask, uint64_t value) {
    if ((g.mask & mask) && (g.value & mask) != value) g.never = true;
    g.groups |= group;
    g.mask |= mask;
    g.value = (g.value & ~mask) | value;
  };
  if (e.gradEnabled) expect(GlobalBits::kGrad, kGradBit, *e.gradEnabled ? kGradBit : 0);
  if (e.deterministic)
    expect(GlobalBits::kDeterministic, kDeterministicBit, *e.deterministic ? kDeterministicBit : 0);
  if (e.defaultDtype)
    expect(GlobalBits::kDefaultDtype, dtypeBits(-1, kDefaultDtypeShift),
           dtypeBits(scalarTypeOf(*e.defaultDtype), kDefaultDtypeShift));
  for (const guards::Autocast& a : e.autocast) {
    const bool cuda = a.device == ir::DeviceType::Cuda;
    const uint64_t on = cuda ? kCudaOnBit : kCpuOnBit;
    const int shift = cuda ? kCudaDtypeShift : kCpuDtypeShift;
    expect(GlobalBits::kAutocastOn, on, a.enabled ? on : 0);
    if (a.enabled) // the dtype only where autocast is on (Autocast::holds)
      expect(cuda ? GlobalBits::kCudaDtype : GlobalBits::kCpuDtype, dtypeBits(-1, shift),
             dtypeBits(scalarTypeOf(a.dtype), shift));
  }
  return g;
}

// Where torch keeps this thread's grad mode and dispatch key sets: thread-locals
// of libc10, each a __tls_get_addr call away; found once per thread, then read
// through one access to this thread-local.
struct TorchThreadState {
  c10::AutogradState* autograd = nullptr;
  c10::impl::PODLocalDispatchKeySet* keys = nullptr;
};

// Not inlined, so that one __tls_get_addr finds it (inlined, GCC repeats the
// call for each access).
__attribute__((noinline)) TorchThreadState* torchThreadStateSlot() {
  static thread_local TorchThreadState state;
  return &state;
}

const TorchThreadState& torchThreadState() {
  TorchThreadState* s = torchThreadStateSlot();
  if (!s->autograd) {
    s->autograd = &c10::AutogradState::get_tls_state();
    s->keys = &c10::impl::raw_local_dispatch_key_set;
  }
  return *s;
}

} // namespace

void GlobalBits::read(uint32_t groups) {
  if (groups & (kGrad | kAutocastOn)) {
    const TorchThreadState& t = torchThreadState();
    if (groups & kGrad) bits |= t.autograd->get_grad_mode() ? kGradBit : 0;
    if (groups & kAutocastOn) {
      // Autocast is on for a device while its dispatch key is not excluded (how
      // torch's is_autocast_enabled(device) reads it).
      const c10::impl::LocalDispatchKeySet keys(*t.keys);
      bits |= keys.excluded_.has(c10::DispatchKey::AutocastCPU) ? 0 : kCpuOnBit;
      bits |= keys.excluded_.has(c10::DispatchKey::AutocastCUDA) ? 0 : kCudaOnBit;
    }
  }
  if (groups & kDeterministic) {
    static at::Context& context = at::globalContext();
    bits |= context.deterministicAlgorithms() ? kDeterministicBit : 0;
  }
  if (groups & kDefaultDtype)
    bits |=
        dtypeBits(static_cast<int16_t>(c10::get_default_dtype_as_scalartype()), kDefaultDtypeShift);
  if (groups & kCpuDtype)
    bits |= dtypeBits(static_cast<int16_t>(autocastDtype(false)), kCpuDtypeShift);
  if (groups & kCudaDtype)
    bits |= dtypeBits(static_cast<int16_t>(autocastDtype(true)), kCudaDtypeShift);
  have |= groups;
}

LoadedProgram::LoadedProgram(guards::Program program) : program_(std::move(program)) {
  resolveTorchTypes();
  auto keep = [&](PyObject* o) {
    refs_.push_back(o);
    return o;
  };
  try {
    nodes_.resize(program_.nodes.size());
    uint32_t next = 0;
    for (size_t n = 0; n < program_.nodes.size(); ++n) {
      const guards::Node& node = program_.nodes[n];
      NodeAux& aux = nodes_[n];
      aux.firstCheck = next;
      next += static_cast<uint32_t>(node.checks.size());
      switch (node.step.kind) {
      case StepKind::Kwarg:
      case StepKind::Global:
      case StepKind::KwDefault:
      case StepKind::Attr:
      case StepKind::HasAttr:
      case StepKind::Module:
      case StepKind::ClassAttr:
      case StepKind::Key: aux.name = keep(objectOf(Constant{node.step.name})); break;
      case StepKind::IntKey: aux.name = keep(objectOf(Constant{node.step.index})); break;
      case StepKind::Index:
        if (node.step.index >= 0)
          aux.name = keep(objectOf(Constant{std::to_string(node.step.index)}));
        break;
      default: break;
      }
      for (const Check& c : node.checks) {
        CheckAux a;
        std::string why;
        if (c.kind == Check::Kind::Type) {
          a.type = resolveType(c.type, why);
          if (a.type) keep(reinterpret_cast<PyObject*>(a.type));
          a.byName = !a.type && c.type.qualname.find("<locals>") != std::string::npos;
        } else if (c.kind == Check::Kind::Equals) {
          a.mirror = keep(objectOf(c.equals));
        } else if (c.kind == Check::Kind::Tensor) {
          const guards::TensorCheck& t = c.tensor;
          a.scalarType = scalarTypeOf(t.dtype);
          a.deviceType = static_cast<uint8_t>(t.device.type);
          a.deviceIndex = t.device.index;
          a.requiresGrad = t.requiresGrad;
          a.dims = static_cast<uint8_t>(std::min<size_t>(t.sizes.size(), 255));
          a.anyOffset = !t.storageOffset;
          a.offset = t.storageOffset.value_or(0);
          a.first = static_cast<uint32_t>(dims_.size());
          for (const auto& v : t.sizes) dims_.push_back(v.value_or(kAnySize));
          for (const auto& v : t.strides) dims_.push_back(v.value_or(kAnySize));
          a.staticDims = std::all_of(dims_.begin() + a.first, dims_.end(),
                                     [](int64_t d) { return d != kAnySize; });
        } else if (c.kind == Check::Kind::DictKeys) {
          a.first = static_cast<uint32_t>(keyMirrors_.size());
          for (const Constant& k : c.dictKeys.keys) keyMirrors_.push_back(keep(objectOf(k)));
        }
        checks_.push_back(a);
        unresolved_.push_back(std::move(why));
      }
    }
    for (const std::string& k : program_.call.keywords)
      keywords_.push_back(keep(objectOf(Constant{k})));
    globals_ = packGlobals(program_.globals);
    nodeCount_ = program_.nodes.size();
    symbolCount_ = program_.symbols.size();
    stackSize_ = program_.maxStack + 1;
    const std::vector<guards::Instruction>& code = program_.code;
    shapeFirst_ = code.size() >= 2 && code[0].op == guards::Op::CallShape &&
                  code[1].op == guards::Op::Globals;
    for (size_t pc = shapeFirst_ ? 2 : 0; pc < code.size(); ++pc) {
      const guards::Instruction& i = code[pc];
      LoadedProgram::FastOp op;
      op.op = i.op;
      op.node = i.node;
      op.operand = i.operand;
      const guards::Node& node = program_.nodes[i.node];
      if (i.op == guards::Op::Load) {
        op.parent = node.parent;
        op.what = &node.step;
        op.aux = &nodes_[i.node];
        const StepKind k = node.step.kind;
        if (k == StepKind::Arg && node.step.index >= 0 && node.step.index <= INT32_MAX) {
          op.kind = FastKind::LoadArg;
          op.operand = static_cast<uint32_t>(node.step.index);
        }
        readsFunction_ |= k == StepKind::Global || k == StepKind::Closure ||
                          k == StepKind::Default || k == StepKind::KwDefault;
      } else if (i.op == guards::Op::Check) {
        op.what = &node.checks[i.operand];
        op.aux = &checks_[nodes_[i.node].firstCheck + i.operand];
        const Check::Kind k = node.checks[i.operand].kind;
        op.kind = k == Check::Kind::Type && !checks_[nodes_[i.node].firstCheck + i.operand].byName
                      ? FastKind::CheckType
                  : k == Check::Kind::Tensor ? FastKind::CheckTensor
                                             : FastKind::Other;
      }
      fast_.push_back(op);
    }
  } catch (...) {
    for (PyObject* o : refs_) Py_DECREF(o);
    throw;
  }
}

LoadedProgram::~LoadedProgram() {
  if (!Py_IsInitialized()) return;
  for (PyObject* o : refs_) Py_DECREF(o);
}

PyFrontend::PyFrontend(const LoadedProgram& program, PyObject* fn, PyObject* args, PyObject* kwargs,
                       std::vector<PyObject*>& owned, GlobalBits* globals)
    : p_(program), args_(args), kwargs_(kwargs), owned_(owned), globals_(globals) {
  if (fn && PyMethod_Check(fn)) fn = PyMethod_GET_FUNCTION(fn);
  if (fn && PyFunction_Check(fn)) function_ = fn;
  last_[0].obj = last_[1].obj = nullptr;
}

bool PyFrontend::callShape(const guards::CallShape& shape) {
  const std::vector<PyObject*>& names = p_.keywords(); // shape.keywords as str objects
  if (!args_ || PyTuple_GET_SIZE(args_) != static_cast<Py_ssize_t>(shape.positional)) return false;
  const size_t given = kwargs_ ? static_cast<size_t>(PyDict_GET_SIZE(kwargs_)) : 0;
  if (given != names.size()) return false;
  if (given == 0) return true;
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(kwargs_, &pos, &key, &value)) {
    bool known = false;
    for (PyObject* n : names)
      if (sameStr(key, n)) {
        known = true;
        break;
      }
    if (!known) return false;
  }
  return true;
}

bool PyFrontend::globals(const guards::GlobalState&) {
  if (globals_) return globals_->holds(p_.globals());
  GlobalBits now;
  return now.holds(p_.globals());
}

bool PyFrontend::own(PyObject* made, Value& out) {
  if (!made) {
    PyErr_Clear();
    return false;
  }
  owned_.push_back(made);
  out.obj = made;
  return true;
}

PyFrontend::ObjectDicts& PyFrontend::dictsOf(PyObject* obj) {
  if (last_[0].obj == obj) return last_[0];
  std::swap(last_[0], last_[1]);
  if (last_[0].obj == obj) return last_[0];
  last_[0] = ObjectDicts{};
  last_[0].obj = obj;
  last_[0].dict = instanceDict(obj);
  last_[0].module = last_[0].dict && isModule(obj);
  return last_[0];
}

PyObject* PyFrontend::moduleField(ObjectDicts& d, int field) {
  if (!d.known[field]) {
    PyObject* name = field == 0 ? parametersName() : field == 1 ? buffersName() : modulesName();
    PyObject* f = d.dict ? lookup(d.dict, name) : nullptr;
    d.fields[field] = f && PyDict_Check(f) ? f : nullptr;
    d.known[field] = true;
  }
  return d.fields[field];
}

bool PyFrontend::loadAttr(PyObject* obj, PyObject* name, Value& out) {
  ObjectDicts& d = dictsOf(obj);
  if (d.dict) {
    if ((out.obj = lookup(d.dict, name))) return true;
    if (d.module) // what Module.__getattr__ would find
      for (int field = 0; field < 3; ++field)
        if (PyObject* f = moduleField(d, field))
          if ((out.obj = lookup(f, name))) return true;
  }
  last_[0] = last_[1] = ObjectDicts{};          // what follows may change any dict
  return own(PyObject_GetAttr(obj, name), out); // may run Python code (properties, __getattr__)
}

bool PyFrontend::loadItem(PyObject* obj, int64_t index, PyObject* indexName, Value& out) {
  if (PyList_Check(obj) || PyTuple_Check(obj)) {
    const int64_t n = Py_SIZE(obj);
    const int64_t at = index < 0 ? index + n : index;
    if (at < 0 || at >= n) return false;
    out.obj = PyList_Check(obj) ? PyList_GET_ITEM(obj, at) : PyTuple_GET_ITEM(obj, at);
    return true;
  }
  if (!isIndexedContainer(obj)) return false;
  PyObject* modules = moduleField(dictsOf(obj), 2);
  if (!modules) return false;
  if (index >= 0) return (out.obj = lookup(modules, indexName)) != nullptr;
  const int64_t at = index + PyDict_GET_SIZE(modules);
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  for (int64_t k = 0; PyDict_Next(modules, &pos, &key, &value); ++k)
    if (k == at) return (out.obj = value), true;
  return false;
}

bool PyFrontend::load(const guards::Step& step, Value parent, Value& out) {
  const uint32_t node = p_.nodeOf(step);
  return loadAt(node, step, p_.node(node), parent.obj, out);
}

bool PyFrontend::loadAt(uint32_t node, const guards::Step& step, const LoadedProgram::NodeAux& aux,
                        PyObject* p, Value& out) {
  out.obj = nullptr;
  out.integer = 0;
  out.node = node;
  switch (step.kind) {
  case StepKind::Arg:
    if (!args_ || step.index < 0 || step.index >= PyTuple_GET_SIZE(args_)) return false;
    out.obj = PyTuple_GET_ITEM(args_, step.index);
    return true;
  case StepKind::Kwarg: return kwargs_ && (out.obj = lookup(kwargs_, aux.name)) != nullptr;
  case StepKind::Global: {
    if (!function_) return false;
    auto* f = reinterpret_cast<PyFunctionObject*>(function_);
    if ((out.obj = lookup(f->func_globals, aux.name))) return true;
    return f->func_builtins && PyDict_Check(f->func_builtins) &&
           (out.obj = lookup(f->func_builtins, aux.name)) != nullptr;
  }
  case StepKind::Closure: {
    PyObject* cells = function_ ? PyFunction_GET_CLOSURE(function_) : nullptr;
    if (!cells || step.index < 0 || step.index >= PyTuple_GET_SIZE(cells)) return false;
    PyObject* cell = PyTuple_GET_ITEM(cells, step.index);
    return PyCell_Check(cell) && (out.obj = PyCell_GET(cell)) != nullptr;
  }
  case StepKind::Default: {
    PyObject* defaults = function_ ? PyFunction_GET_DEFAULTS(function_) : nullptr;
    if (!defaults || !PyTuple_Check(defaults) || step.index < 0 ||
        step.index >= PyTuple_GET_SIZE(defaults))
      return false;
    out.obj = PyTuple_GET_ITEM(defaults, step.index);
    return true;
  }
  case StepKind::KwDefault: {
    PyObject* defaults = function_ ? PyFunction_GET_KW_DEFAULTS(function_) : nullptr;
    return defaults && PyDict_Check(defaults) && (out.obj = lookup(defaults, aux.name)) != nullptr;
  }
  case StepKind::Attr: return p && loadAttr(p, aux.name, out);
  case StepKind::Module: return (out.obj = lookup(PyImport_GetModuleDict(), aux.name)) != nullptr;
  case StepKind::ClassAttr: { // what the first class of __mro__[i:] whose dict has it holds (borrowed: the class keeps it)
    if (!p || !PyType_Check(p)) return false;
    PyObject* mro = reinterpret_cast<PyTypeObject*>(p)->tp_mro;
    if (!mro || !PyTuple_Check(mro)) return false;
    for (Py_ssize_t k = step.index; k < PyTuple_GET_SIZE(mro); ++k) {
      PyObject* dict = typeDict(reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, k)));
      PyObject* found = dict ? PyDict_GetItemWithError(dict, aux.name) : nullptr;
      Py_XDECREF(dict);
      if (found) return (out.obj = found), true;
      if (PyErr_Occurred()) return PyErr_Clear(), false;
    }
    return false;
  }
  case StepKind::HasAttr: {
    if (!p) return false;
    PyObject* value = PyObject_GetAttr(p, aux.name);
    if (value != nullptr) {
      Py_DECREF(value);
      out.obj = Py_True;
      return true;
    }
    bool absent = PyErr_ExceptionMatches(PyExc_AttributeError);
    PyErr_Clear(); // a lookup that raises another error: not decided here
    out.obj = Py_False;
    return absent;
  }
  case StepKind::Index: return p && loadItem(p, step.index, aux.name, out);
  case StepKind::Key:
  case StepKind::IntKey: {
    if (!p) return false;
    PyObject* dict = PyDict_Check(p) ? p : isKeyedContainer(p) ? modulesOf(p) : nullptr;
    if (!dict) return false;
    if ((out.obj = lookup(dict, aux.name)) != nullptr) return true;
    // A module's globals (fn.__globals__['float']): Python looks in its builtins next.
    PyObject* builtins = step.kind == StepKind::Key ? lookup(dict, builtinsName()) : nullptr;
    if (builtins && PyModule_Check(builtins)) builtins = PyModule_GetDict(builtins);
    return builtins && PyDict_Check(builtins) && (out.obj = lookup(builtins, aux.name)) != nullptr;
  }
  case StepKind::Size:
  case StepKind::Stride: {
    if (!p || !isTensor(p)) return false;
    try {
      const at::Tensor& t = THPVariable_Unpack(p);
      c10::IntArrayRef dims = step.kind == StepKind::Size ? t.sizes() : t.strides();
      if (step.index < 0 || static_cast<size_t>(step.index) >= dims.size()) return false;
      out.integer = dims[static_cast<size_t>(step.index)];
      return true;
    } catch (const std::exception&) { // sparse and nested tensors have no strides
      return false;
    }
  }
  case StepKind::Value: {
    if (!p || !isTensor(p)) return false;
    PyObject* value = scalarOf(THPVariable_Unpack(p));
    if (!value) return false;
    owned_.push_back(value);
    out.obj = value;
    return true;
  }
  }
  return false;
}

namespace {

std::optional<uint64_t> fastLength(PyObject* o) {
  if (PyList_Check(o) || PyTuple_Check(o)) return static_cast<uint64_t>(Py_SIZE(o));
  if (PyDict_Check(o)) return static_cast<uint64_t>(PyDict_GET_SIZE(o));
  if (PyUnicode_CheckExact(o)) return static_cast<uint64_t>(PyUnicode_GET_LENGTH(o));
  if (isIndexedContainer(o) || isKeyedContainer(o))
    if (PyObject* modules = modulesOf(o)) return static_cast<uint64_t>(PyDict_GET_SIZE(modules));
  return std::nullopt;
}

bool tensorMatches(PyObject* o, const LoadedProgram::CheckAux& e, const int64_t* dims) {
  if (!isTensor(o)) return false;
  try {
    const at::Tensor& t = THPVariable_Unpack(o);
    if (static_cast<int16_t>(t.scalar_type()) != e.scalarType) return false;
    const c10::Device device = t.device();
    const uint8_t type =
        device.type() == c10::DeviceType::CPU    ? static_cast<uint8_t>(ir::DeviceType::Cpu)
        : device.type() == c10::DeviceType::CUDA ? static_cast<uint8_t>(ir::DeviceType::Cuda)
                                                 : 0xff;
    if (type != e.deviceType || device.index() != e.deviceIndex) return false;
    c10::IntArrayRef sizes = t.sizes();
    if (sizes.size() != e.dims) return false;
    c10::IntArrayRef strides = t.strides();
    const int64_t* expectedStrides = dims + e.dims;
    if (e.staticDims) {
      int64_t differ = 0;
      for (size_t k = 0; k < e.dims; ++k)
        differ |= (dims[k] ^ sizes[k]) | (expectedStrides[k] ^ strides[k]);
      if (differ) return false;
    } else
      for (size_t k = 0; k < e.dims; ++k)
        if ((dims[k] != LoadedProgram::kAnySize && dims[k] != sizes[k]) ||
            (expectedStrides[k] != LoadedProgram::kAnySize && expectedStrides[k] != strides[k]))
          return false;
    if (!e.anyOffset && e.offset != t.storage_offset()) return false;
    return t.requires_grad() == e.requiresGrad; // a call into torch: last
  } catch (const std::exception&) {
    return false;
  }
}

bool dictKeysMatch(PyObject* o, const guards::DictKeys& e, PyObject* const* mirrors) {
  PyObject* dict = PyDict_Check(o) ? o : isKeyedContainer(o) ? modulesOf(o) : nullptr;
  if (!dict || static_cast<size_t>(PyDict_GET_SIZE(dict)) != e.keys.size()) return false;
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  for (size_t k = 0; PyDict_Next(dict, &pos, &key, &value); ++k) {
    if (e.ordered) {
      if (!equalsConstant(key, e.keys[k], mirrors[k])) return false;
      continue;
    }
    bool found = false;
    for (size_t j = 0; j < e.keys.size() && !found; ++j)
      found = equalsConstant(key, e.keys[j], mirrors[j]);
    if (!found) return false;
  }
  return true;
}

// Whether a class is the one a TypeRef names, by its __module__ and __qualname__
// (for a class local to a function, which no import finds: as the guards
// service compares a described value's type).
bool namedAs(PyTypeObject* type, const guards::TypeRef& ref) {
  if (!PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE)) return false;
  const char* qualname = PyUnicode_AsUTF8(reinterpret_cast<PyHeapTypeObject*>(type)->ht_qualname);
  if (!qualname) {
    PyErr_Clear();
    return false;
  }
  if (ref.qualname != qualname) return false;
  PyObject* module = PyDict_GetItemString(type->tp_dict, "__module__"); // borrowed
  const char* name = module && PyUnicode_Check(module) ? PyUnicode_AsUTF8(module) : nullptr;
  if (!name) {
    PyErr_Clear();
    return false;
  }
  return ref.module == name;
}

} // namespace

bool PyFrontend::check(Value v, const Check& c) {
  return checkWith(v, c, p_.check(v.node, c));
}

bool PyFrontend::checkWith(const Value& v, const Check& c, const LoadedProgram::CheckAux& aux) {
  if (!v.obj) { // an int read from a tensor
    switch (c.kind) {
    case Check::Kind::Type: return aux.type == &PyLong_Type;
    case Check::Kind::Equals: {
      auto i = std::get_if<int64_t>(&c.equals.value);
      return i && *i == v.integer;
    }
    default: return false;
    }
  }
  PyObject* o = v.obj;
  switch (c.kind) {
  case Check::Kind::Type:
    return aux.type ? Py_TYPE(o) == aux.type : aux.byName && namedAs(Py_TYPE(o), c.type);
  case Check::Kind::Identity:
    return c.identity.scope == guardScope() && c.identity.id == reinterpret_cast<uintptr_t>(o);
  case Check::Kind::Equals: return equalsConstant(o, c.equals, aux.mirror);
  case Check::Kind::Length: {
    auto n = fastLength(o);
    return n && *n == c.length;
  }
  case Check::Kind::DictKeys: return dictKeysMatch(o, c.dictKeys, p_.keyMirrors(aux));
  case Check::Kind::Tensor: return tensorMatches(o, aux, p_.dims(aux));
  }
  return false;
}

bool PyFrontend::integer(Value v, int64_t& out) {
  if (!v.obj) {
    out = v.integer;
    return true;
  }
  if (!PyLong_CheckExact(v.obj)) return false;
  int overflow = 0;
  long long i = PyLong_AsLongLongAndOverflow(v.obj, &overflow);
  if (overflow || (i == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  out = i;
  return true;
}

void PyFrontend::done() {
  if (owned_.empty()) return;
  for (PyObject* o : owned_) Py_DECREF(o);
  owned_.clear();
}

// ---- the slow path: described values, words through InputFrontend ----

std::string PyFrontend::callText() {
  guards::CallInput call;
  call.args.resize(args_ ? static_cast<size_t>(PyTuple_GET_SIZE(args_)) : 0);
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (kwargs_ && PyDict_Next(kwargs_, &pos, &key, &value)) {
    const char* name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : nullptr;
    if (!name) PyErr_Clear();
    call.kwargs.emplace_back(name ? name : "?", Input{});
  }
  return guards::InputFrontend(call).callText();
}

guards::GlobalState PyFrontend::globalState() {
  return currentGlobalState();
}

namespace {

// Runs one of InputFrontend's describing methods on the value, described.
template <class F> auto describedAs(const PyFrontend::Value& v, int depth, F f) {
  guards::CallInput none;
  guards::InputFrontend frontend(none);
  if (!v.obj) return f(frontend, guards::InputFrontend::Value{nullptr, v.integer});
  Input in = describeValue(v.obj, depth);
  return f(frontend, guards::InputFrontend::Value{&in, 0});
}

} // namespace

guards::TypeRef PyFrontend::type(Value v) {
  return describedAs(v, 0, [](auto& f, auto x) { return f.type(x); });
}
std::string PyFrontend::repr(Value v) {
  return describedAs(v, 8, [](auto& f, auto x) { return f.repr(x); });
}
std::optional<uint64_t> PyFrontend::length(Value v) {
  return describedAs(v, 1, [](auto& f, auto x) { return f.length(x); });
}
std::optional<std::vector<Constant>> PyFrontend::keys(Value v) {
  return describedAs(v, 1, [](auto& f, auto x) { return f.keys(x); });
}
std::optional<guards::TensorInput> PyFrontend::tensor(Value v) {
  return describedAs(v, 0, [](auto& f, auto x) { return f.tensor(x); });
}

namespace {

// guards::run over the program's FastOps: the same instructions in the same order
// through the same front end, with what each reads resolved when it was loaded.
__attribute__((flatten)) bool runFast(const LoadedProgram& program, PyFrontend& f,
                                      RunScratch& scratch) {
  const guards::Program& p = program.program();
  guards::Scratch<PyFrontend::Value>& s = scratch.registers;
  if (scratch.nodes < program.nodeCount() || scratch.symbols < program.symbolCount() ||
      scratch.stack < program.stackSize()) {
    s.fit(p);
    scratch.nodes = s.registers.size();
    scratch.symbols = s.symbols.size();
    scratch.stack = s.stack.size();
  }
  // compile() puts the call shape and the global state first (fastCode() starts after them).
  if (program.shapeFirst() && !(f.callShape(p.call) && f.globals(p.globals))) {
    f.done();
    return false;
  }
  PyFrontend::Value* r = s.registers.data();
  PyObject* args = f.args();
  for (const LoadedProgram::FastOp& i : program.fastCode()) {
    bool ok = false;
    PyFrontend::Value& v = r[i.node];
    // What PyFrontend::loadAt and checkWith do for these kinds, without the call.
    switch (i.kind) {
    case FastKind::LoadArg:
      v.obj = args && static_cast<Py_ssize_t>(i.operand) < PyTuple_GET_SIZE(args)
                  ? PyTuple_GET_ITEM(args, i.operand)
                  : nullptr;
      v.integer = 0;
      v.node = i.node;
      ok = v.obj != nullptr;
      break;
    case FastKind::CheckType: {
      PyTypeObject* type = static_cast<const LoadedProgram::CheckAux*>(i.aux)->type;
      ok = v.obj ? Py_TYPE(v.obj) == type : type == &PyLong_Type;
      break;
    }
    case FastKind::CheckTensor: {
      const auto& aux = *static_cast<const LoadedProgram::CheckAux*>(i.aux);
      ok = v.obj && tensorMatches(v.obj, aux, program.dims(aux));
      break;
    }
    case FastKind::Other: break;
    }
    if (i.kind != FastKind::Other) {
      if (!ok) {
        f.done();
        return false;
      }
      continue;
    }
    switch (i.op) {
    case guards::Op::CallShape: ok = f.callShape(p.call); break;
    case guards::Op::Globals: ok = f.globals(p.globals); break;
    case guards::Op::Load:
      ok = f.loadAt(i.node, *static_cast<const guards::Step*>(i.what),
                    *static_cast<const LoadedProgram::NodeAux*>(i.aux),
                    i.parent < 0 ? nullptr : r[i.parent].obj, r[i.node]);
      break;
    case guards::Op::Check:
      ok = f.checkWith(r[i.node], *static_cast<const Check*>(i.what),
                       *static_cast<const LoadedProgram::CheckAux*>(i.aux));
      break;
    case guards::Op::Symbol: ok = f.integer(r[i.node], s.symbols[i.operand]); break;
    case guards::Op::Shape:
      ok = guards::evaluateShape(p.shapes[i.operand], s.symbols.data(), s.stack.data());
      break;
    }
    if (!ok) {
      f.done();
      return false;
    }
  }
  f.done();
  return true;
}

} // namespace

bool passes(const LoadedProgram& program, PyObject* fn, PyObject* args, PyObject* kwargs,
            RunScratch& scratch, GlobalBits* globals) {
  if (scratch.busy) { // re-entered from Python code that a load ran
    RunScratch fresh;
    fresh.busy = true;
    return passes(program, fn, args, kwargs, fresh, globals);
  }
  scratch.busy = true;
  struct Release {
    RunScratch& s;
    ~Release() { s.busy = false; }
  } release{scratch};
  PyFrontend f(program, fn, args, kwargs, scratch.owned, globals);
  return runFast(program, f, scratch);
}

std::optional<std::string> explainCall(const LoadedProgram& program, PyObject* fn, PyObject* args,
                                       PyObject* kwargs) {
  RunScratch scratch;
  PyFrontend f(program, fn, args, kwargs, scratch.owned);
  size_t failedAt = 0;
  std::string reason;
  try {
    if (guards::run(program.program(), f, scratch.registers, &failedAt, &reason))
      return std::nullopt;
  } catch (...) {
    f.done();
    throw;
  }
  const guards::Program& p = program.program();
  const guards::Instruction& i = p.code[failedAt];
  if (i.op == guards::Op::Check) {
    const Check& c = p.nodes[i.node].checks[i.operand];
    const LoadedProgram::CheckAux& aux = program.check(i.node, c);
    if (c.kind == Check::Kind::Type && !aux.type && !aux.byName)
      return guards::describe(p.sources[i.node], c) + " failed: " + program.unresolved(i.node, c);
  }
  return reason;
}

// ---- describing Python values ----

guards::TypeRef typeRefOf(PyTypeObject* type) {
  pybind11::handle t(reinterpret_cast<PyObject*>(type));
  guards::TypeRef ref;
  ref.module = pybind11::str(t.attr("__module__"));
  ref.qualname = pybind11::str(t.attr("__qualname__"));
  return ref;
}

std::optional<Constant> constantFrom(PyObject* o) {
  if (o == Py_None) return Constant{};
  if (PyBool_Check(o)) return Constant{o == Py_True};
  if (PyLong_CheckExact(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return std::nullopt;
    return Constant{static_cast<int64_t>(v)};
  }
  if (PyFloat_CheckExact(o)) return Constant{PyFloat_AS_DOUBLE(o)};
  if (PyUnicode_CheckExact(o)) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s) throw pybind11::error_already_set();
    return Constant{std::string(s, static_cast<size_t>(n))};
  }
  if (PyTuple_Check(o)) {
    Constant::Tuple items;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(o); ++k) {
      auto c = constantFrom(PyTuple_GET_ITEM(o, k));
      if (!c) return std::nullopt;
      items.push_back(std::move(*c));
    }
    return Constant{std::move(items)};
  }
  return std::nullopt;
}

namespace {

std::optional<guards::TensorInput> tensorInputOf(PyObject* o) {
  try {
    const at::Tensor& t = THPVariable_Unpack(o);
    auto dtype = dtypeOf(t.scalar_type());
    auto device = deviceOf(t.device());
    if (!dtype || !device) return std::nullopt;
    guards::TensorInput in;
    in.dtype = *dtype;
    in.device = *device;
    in.requiresGrad = t.requires_grad();
    in.sizes = t.sizes().vec();
    in.strides = t.strides().vec();
    in.storageOffset = t.storage_offset();
    in.value = valueOf(t);
    return in;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

class Describer {
public:
  Input value(PyObject* o, int depth) {
    Input in;
    if (o == Py_None) return in;
    PyTypeObject* type = Py_TYPE(o);
    const uint64_t id = reinterpret_cast<uintptr_t>(o);
    if (PyBool_Check(o)) return Input::of(o == Py_True);
    if (PyLong_CheckExact(o) || PyFloat_CheckExact(o) || PyUnicode_CheckExact(o)) {
      if (auto c = constantFrom(o)) {
        if (auto i = std::get_if<int64_t>(&c->value)) in = Input::of(*i);
        if (auto d = std::get_if<double>(&c->value)) in = Input::of(*d);
        if (auto s = std::get_if<std::string>(&c->value)) in = Input::of(*s);
        in.id = id;
        return in;
      }
      return Input::object(typeRefOf(type), id, {}); // an int beyond int64
    }
    if (isTensor(o)) {
      if (auto t = tensorInputOf(o)) {
        in = Input::of(std::move(*t));
        if (type != reinterpret_cast<PyTypeObject*>(THPVariableClass)) in.type = typeRefOf(type);
        in.id = id;
        return in;
      }
      return Input::object(typeRefOf(type), id, {});
    }
    const bool builtinContainer = PyList_Check(o) || PyTuple_Check(o) || PyDict_Check(o);
    const bool moduleContainer = isIndexedContainer(o) || isKeyedContainer(o);
    if (depth < 0 || !onPath_.insert(o).second) {
      // Too deep, or a cycle: the object itself, without its contents.
      if (PyTuple_Check(o) && depth < 0 && constantFrom(o)) return value(o, 0); // a constant key
      return Input::object(typeRefOf(type), id, {});
    }
    struct Leave {
      std::unordered_set<PyObject*>& path;
      PyObject* o;
      ~Leave() { path.erase(o); }
    } leave{onPath_, o};
    if (builtinContainer || moduleContainer) {
      if (PyList_Check(o) || PyTuple_Check(o)) {
        std::vector<Input> items;
        for (Py_ssize_t k = 0; k < Py_SIZE(o); ++k)
          items.push_back(
              value(PyList_Check(o) ? PyList_GET_ITEM(o, k) : PyTuple_GET_ITEM(o, k), depth - 1));
        in = PyList_Check(o) ? Input::list(std::move(items)) : Input::tuple(std::move(items));
      } else if (PyDict_Check(o)) {
        in = Input::dict(entries(o, depth));
      } else {
        PyObject* modules = modulesOf(o);
        if (isKeyedContainer(o)) {
          in = Input::dict(modules ? entries(modules, depth)
                                   : std::vector<std::pair<Input, Input>>{});
        } else {
          std::vector<Input> items;
          Py_ssize_t pos = 0;
          PyObject *key, *item;
          while (modules && PyDict_Next(modules, &pos, &key, &item))
            items.push_back(value(item, depth - 1));
          in = Input::list(std::move(items));
        }
        in.attrs = attrs(o, depth);
      }
      const bool exact = Py_IS_TYPE(o, &PyList_Type) || Py_IS_TYPE(o, &PyTuple_Type) ||
                         Py_IS_TYPE(o, &PyDict_Type);
      if (!exact) in.type = typeRefOf(type);
      in.id = id;
      return in;
    }
    const bool opaque = PyModule_Check(o) || PyType_Check(o) || PyFunction_Check(o) ||
                        PyCFunction_Check(o) || PyMethod_Check(o);
    return Input::object(typeRefOf(type), id,
                         opaque ? std::vector<std::pair<std::string, Input>>{} : attrs(o, depth));
  }

private:
  std::vector<std::pair<Input, Input>> entries(PyObject* dict, int depth) {
    std::vector<std::pair<Input, Input>> out;
    Py_ssize_t pos = 0;
    PyObject *key, *item;
    while (PyDict_Next(dict, &pos, &key, &item))
      out.emplace_back(value(key, depth + 2), value(item, depth - 1));
    return out;
  }

  // The instance __dict__'s str-named entries; for an nn.Module, its
  // parameters, buffers and submodules too (what Module.__getattr__ finds).
  std::vector<std::pair<std::string, Input>> attrs(PyObject* o, int depth) {
    std::vector<std::pair<std::string, Input>> out;
    PyObject* dict = instanceDict(o);
    if (!dict) return out;
    const bool module = isModule(o);
    auto add = [&](PyObject* from, bool skipModuleDicts) {
      Py_ssize_t pos = 0;
      PyObject *key, *item;
      while (PyDict_Next(from, &pos, &key, &item)) {
        if (!PyUnicode_Check(key)) continue;
        if (skipModuleDicts && (sameStr(key, parametersName()) || sameStr(key, buffersName()) ||
                                sameStr(key, modulesName())))
          continue;
        const char* name = PyUnicode_AsUTF8(key);
        if (!name) throw pybind11::error_already_set();
        out.emplace_back(name, value(item, depth - 1));
      }
    };
    add(dict, module);
    if (module)
      for (PyObject* field : {parametersName(), buffersName(), modulesName()}) {
        PyObject* d = PyDict_GetItem(dict, field);
        if (d && PyDict_Check(d)) add(d, false);
      }
    return out;
  }

  std::unordered_set<PyObject*> onPath_;
};

} // namespace

Input describeValue(PyObject* obj, int depth) {
  resolveTorchTypes();
  return Describer().value(obj, depth);
}

guards::GlobalState currentGlobalState() {
  guards::GlobalState s;
  s.gradEnabled = c10::GradMode::is_enabled();
  s.defaultDtype = dtypeOf(c10::get_default_dtype_as_scalartype());
  s.deterministic = at::globalContext().deterministicAlgorithms();
  s.autocast = {autocastOf(ir::DeviceType::Cpu), autocastOf(ir::DeviceType::Cuda)};
  return s;
}

guards::CallInput describeCall(PyObject* fn, PyObject* args, PyObject* kwargs) {
  namespace py = pybind11;
  resolveTorchTypes();
  guards::CallInput call;
  Describer d;
  constexpr int kDepth = 6;
  for (Py_ssize_t k = 0; args && k < PyTuple_GET_SIZE(args); ++k)
    call.args.push_back(d.value(PyTuple_GET_ITEM(args, k), kDepth));
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (kwargs && PyDict_Next(kwargs, &pos, &key, &value))
    call.kwargs.emplace_back(py::str(key).cast<std::string>(), d.value(value, kDepth));
  if (fn && PyMethod_Check(fn)) fn = PyMethod_GET_FUNCTION(fn);
  if (fn && PyFunction_Check(fn)) {
    auto* f = reinterpret_cast<PyFunctionObject*>(fn);
    auto* code = reinterpret_cast<PyCodeObject*>(f->func_code);
    PyObject* names = code->co_names;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(names); ++k) {
      PyObject* name = PyTuple_GET_ITEM(names, k);
      PyObject* v = PyDict_GetItem(f->func_globals, name);
      if (!v && f->func_builtins && PyDict_Check(f->func_builtins))
        v = PyDict_GetItem(f->func_builtins, name);
      if (v) call.globals.emplace_back(py::str(name).cast<std::string>(), d.value(v, kDepth));
    }
    if (f->func_defaults && PyTuple_Check(f->func_defaults))
      for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(f->func_defaults); ++k)
        call.defaults.push_back(d.value(PyTuple_GET_ITEM(f->func_defaults, k), kDepth));
    pos = 0;
    while (f->func_kwdefaults && PyDict_Check(f->func_kwdefaults) &&
           PyDict_Next(f->func_kwdefaults, &pos, &key, &value))
      call.kwDefaults.emplace_back(py::str(key).cast<std::string>(), d.value(value, kDepth));
    PyObject* cells = f->func_closure;
    for (Py_ssize_t k = 0; cells && k < PyTuple_GET_SIZE(cells); ++k) {
      PyObject* content = PyCell_GET(PyTuple_GET_ITEM(cells, k));
      call.closure.push_back(content ? d.value(content, kDepth) : Input::none());
    }
  }
  call.state = currentGlobalState();
  call.scope = guardScope();
  return call;
}

} // namespace kiln::python
