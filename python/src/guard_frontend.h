// The guard VM's Python front end (libs/guards/vm.h): reads a Python call —
// the function object, its args tuple and kwargs dict — through the CPython C
// API and torch's C++ API, and behaves as InputFrontend does on the same call
// described as a CallInput (same pass or fail, same failure words).
//
// Hot path (`passes`): no Python-level calls and no allocation, with three
// documented exceptions that may run Python code: an attribute found neither
// in the instance __dict__ nor in an nn.Module's _parameters/_buffers/_modules
// (PyObject_GetAttr), an item of a sequence that is no list, tuple or module
// container (PySequence_GetItem), and the length of such an object. What those
// return is released in done(). Everything else reads borrowed references.
//
// Every function here needs the GIL.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/guards/input.h"
#include "kiln/guards/program.h"
#include "kiln/guards/vm.h"

namespace kiln::python {

// This process's scope token: identity guards recorded here hold only here.
uint64_t guardScope();

// torch's c10::ScalarType of a dtype, as its int16 value (-1 for none).
int16_t scalarTypeOf(DType t);

// A Program with what the front end resolves once, when it is loaded: type
// references to type objects, names and keys to Python objects, constants to
// Python mirrors of themselves.
class LoadedProgram {
public:
  explicit LoadedProgram(guards::Program program);
  ~LoadedProgram();
  LoadedProgram(const LoadedProgram&) = delete;
  LoadedProgram& operator=(const LoadedProgram&) = delete;

  struct NodeAux {
    PyObject* name = nullptr; // kwarg/global/attr/key name (str), an int key (int), an index's str
    uint32_t firstCheck = 0;  // this node's checks start here in `checks`
  };
  // What a check reads on the hot path, packed (the Check itself is large).
  struct CheckAux {
    PyTypeObject* type = nullptr; // Type: the resolved type, or null (see unresolved())
    bool byName = false;          // Type: a class local to a function, found by no import:
                                  // checked by its __module__ and __qualname__
    PyObject* mirror = nullptr;   // Equals: the constant as a Python object
    uint32_t first = 0;           // DictKeys: its keys in keyMirrors(); Tensor: its dims in dims()
    int16_t scalarType = -1;      // Tensor: the dtype as torch's c10::ScalarType
    int16_t deviceIndex = -1;     // Tensor: the device
    uint8_t deviceType = 0;       //   (ir::DeviceType)
    uint8_t dims = 0;             // Tensor: its dim count
    bool requiresGrad = false;
    bool anyOffset = false;  // Tensor: the storage offset is dynamic
    bool staticDims = false; // Tensor: no size or stride is dynamic
    int64_t offset = 0;
  };
  static constexpr int64_t kAnySize = INT64_MIN; // a dynamic size or stride in dims()

  // The guarded global state packed as GlobalBits packs torch's (see there):
  // it holds when (bits & mask) == value. `groups`: what must be read from torch.
  struct GlobalsAux {
    uint32_t groups = 0;
    bool never = false; // two autocast guards of one device that disagree
    uint64_t mask = 0;
    uint64_t value = 0;
  };

  // The program as the fast path runs it: what each instruction reads, resolved.
  // The most common instructions have kinds of their own, run without a call
  // into the front end; the others run as the VM runs them.
  enum class FastKind : uint8_t {
    Other,
    LoadArg,     // register = args[operand]
    CheckType,   // Py_TYPE(register) is the check's type
    CheckTensor, // the register is a tensor as the check says
  };
  struct FastOp {
    guards::Op op;
    FastKind kind = FastKind::Other;
    int32_t parent = -1;        // Load: the parent's register, or -1 for a root
    uint32_t node = 0;          // Load, Check, Symbol: the register
    uint32_t operand = 0;       // Symbol: the slot; Shape: the shape guard; LoadArg: i
    const void* what = nullptr; // Load: the guards::Step; Check: the guards::Check
    const void* aux = nullptr;  // Load: the NodeAux; Check: the CheckAux
  };

  const guards::Program& program() const { return program_; }
  const NodeAux& node(uint32_t n) const { return nodes_[n]; }
  const CheckAux& check(uint32_t node, const guards::Check& c) const {
    return checks_[nodes_[node].firstCheck +
                   static_cast<uint32_t>(&c - program_.nodes[node].checks.data())];
  }
  // The node whose step this is (the VM hands steps of program().nodes).
  uint32_t nodeOf(const guards::Step& step) const {
    return static_cast<uint32_t>((reinterpret_cast<const char*>(&step) -
                                  reinterpret_cast<const char*>(&program_.nodes[0].step)) /
                                 sizeof(guards::Node));
  }
  const std::vector<PyObject*>& keywords() const { return keywords_; }
  // A tensor check's sizes, then its strides; kAnySize where dynamic.
  const int64_t* dims(const CheckAux& a) const { return dims_.data() + a.first; }
  PyObject* const* keyMirrors(const CheckAux& a) const { return keyMirrors_.data() + a.first; }
  // Why a Type check's type could not be found (the slow path).
  const std::string& unresolved(uint32_t node, const guards::Check& c) const {
    return unresolved_[static_cast<size_t>(&check(node, c) - checks_.data())];
  }
  const GlobalsAux& globals() const { return globals_; }
  // The code as the fast path runs it; without the call shape and global state
  // where those come first (shapeFirst()), as compile() puts them.
  const std::vector<FastOp>& fastCode() const { return fast_; }
  bool shapeFirst() const { return shapeFirst_; }
  // Whether a load reads the called function (a global, closure cell or default).
  bool readsFunction() const { return readsFunction_; }
  // What a run's scratch must hold: registers, symbol slots, stack entries.
  size_t nodeCount() const { return nodeCount_; }
  size_t symbolCount() const { return symbolCount_; }
  size_t stackSize() const { return stackSize_; }

private:
  guards::Program program_;
  std::vector<NodeAux> nodes_;
  std::vector<CheckAux> checks_;
  std::vector<std::string> unresolved_; // by check, as checks_
  std::vector<int64_t> dims_;
  std::vector<PyObject*> keyMirrors_;
  std::vector<PyObject*> keywords_;
  GlobalsAux globals_;
  std::vector<FastOp> fast_;
  bool readsFunction_ = false;
  bool shapeFirst_ = false;
  size_t nodeCount_ = 0, symbolCount_ = 0, stackSize_ = 0;
  std::vector<PyObject*> refs_; // every reference above, released at the end
};

// torch's global state packed in one word — grad mode (bit 0), deterministic
// algorithms (1), autocast on for cpu and cuda (2, 3), the default dtype (bits
// 8-15), the autocast dtype of cpu (16-23) and cuda (24-31) — read from torch in
// groups on first need. One read serves every program a lookup runs.
struct GlobalBits {
  enum Group : uint32_t {
    kGrad = 1,
    kDeterministic = 2,
    kDefaultDtype = 4,
    kAutocastOn = 8,
    kCpuDtype = 16,
    kCudaDtype = 32,
  };
  uint64_t bits = 0;
  uint32_t have = 0; // the groups read

  bool holds(const LoadedProgram::GlobalsAux& g) {
    if (g.groups & ~have) read(g.groups & ~have);
    return (bits & g.mask) == g.value && !g.never;
  }
  void read(uint32_t groups);
};

class PyFrontend {
public:
  struct Value {
    PyObject* obj = nullptr; // null: an int read from a tensor's sizes or strides
    int64_t integer = 0;
    uint32_t node = 0;
  };

  // `fn` may be a function or a bound method (its function is read), or null;
  // `kwargs` a dict or null. `owned` collects what loads made; done() empties it.
  // `globals`: the global state read so far in this lookup (null: read afresh).
  PyFrontend(const LoadedProgram& program, PyObject* fn, PyObject* args, PyObject* kwargs,
             std::vector<PyObject*>& owned, GlobalBits* globals = nullptr);

  PyObject* args() const { return args_; }
  bool callShape(const guards::CallShape& shape);
  bool globals(const guards::GlobalState& expected);
  bool load(const guards::Step& step, Value parent, Value& out);
  bool check(Value v, const guards::Check& c);
  bool integer(Value v, int64_t& out);
  void done();
  // load() and check() with the register and what they read resolved (the fast path).
  bool loadAt(uint32_t node, const guards::Step& step, const LoadedProgram::NodeAux& aux,
              PyObject* parent, Value& out);
  bool checkWith(const Value& v, const guards::Check& c, const LoadedProgram::CheckAux& aux);

  // The slow path: may call Python.
  std::string callText();
  guards::GlobalState globalState();
  guards::TypeRef type(Value v);
  std::string repr(Value v);
  std::optional<uint64_t> length(Value v);
  std::optional<std::vector<guards::Constant>> keys(Value v);
  std::optional<guards::TensorInput> tensor(Value v);

private:
  bool loadAttr(PyObject* obj, PyObject* name, Value& out);
  bool loadItem(PyObject* obj, int64_t index, PyObject* indexName, Value& out);
  bool own(PyObject* made, Value& out); // a new reference (null: failed, error cleared)
  // The dicts an attribute or module item is read from, for the two objects last
  // read (a ModuleList and its current layer: the list's items, a layer's weight
  // and bias): found once per run, forgotten before anything that may run Python.
  // (Not initialized but by ObjectDicts{}: a run that reads no attribute pays nothing.)
  struct ObjectDicts {
    PyObject* obj;
    PyObject* dict; // its instance __dict__
    bool module;    // an nn.Module: _parameters, _buffers, _modules below
    bool known[3];
    PyObject* fields[3];
  };
  ObjectDicts& dictsOf(PyObject* obj);
  PyObject* moduleField(ObjectDicts& d, int field); // 0 _parameters, 1 _buffers, 2 _modules

  const LoadedProgram& p_;
  PyObject* function_ = nullptr;
  PyObject* args_;
  PyObject* kwargs_;
  std::vector<PyObject*>& owned_;
  GlobalBits* globals_;
  ObjectDicts last_[2]; // [0] the most recent; empty while obj is null
};

// Reusable state of one program's runs. A run that finds it busy (another
// thread ran Python code inside a load, or re-entered) uses a fresh one.
struct RunScratch {
  guards::Scratch<PyFrontend::Value> registers;
  size_t nodes = 0, symbols = 0, stack = 0; // what `registers` fits
  std::vector<PyObject*> owned;
  bool busy = false;
};

// The fast path: does `program` hold of the call? `globals`: the global state
// read so far in this lookup, shared by the programs of a cache (null: read afresh).
bool passes(const LoadedProgram& program, PyObject* fn, PyObject* args, PyObject* kwargs,
            RunScratch& scratch, GlobalBits* globals = nullptr);
// The slow path: nullopt when it holds, else why not (as the C++ front end words it).
std::optional<std::string> explainCall(const LoadedProgram& program, PyObject* fn, PyObject* args,
                                       PyObject* kwargs);

// Python values as the guards' C++ inputs (the slow path; calls Python).
// `depth`: how far into containers and object attributes to describe.
guards::Input describeValue(PyObject* obj, int depth = 6);
guards::GlobalState currentGlobalState();
// The call: args, kwargs, the globals the code names (then builtins), the
// closure cells' contents, the function's defaults, the global state and this
// process's scope.
guards::CallInput describeCall(PyObject* fn, PyObject* args, PyObject* kwargs);
guards::TypeRef typeRefOf(PyTypeObject* type);
// A Python constant (None, bool, int, float, str, tuples of them); nullopt otherwise.
std::optional<guards::Constant> constantFrom(PyObject* obj);

} // namespace kiln::python
