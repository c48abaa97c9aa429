// _kiln.ir: graphs of libs/ir built from Python, and the reference interpreter
// run on raw tensor bytes. Conversion only, as in _kiln.cpp; torch tensors are
// turned into bytes and back in python/kiln/ir.py.
#include "ir_bindings.h"

#include "sym_operators.h"
#include "torch_blocks.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kiln/autograd/functionalize.h"
#include "kiln/autograd/partition.h"
#include "kiln/autograd/rules.h"
#include "kiln/common/error.h"
#include "kiln/ir/graph.h"
#include "kiln/ir/hash.h"
#include "kiln/ir/interpreter.h"
#include "kiln/ir/op_registry.h"
#include "kiln/ir/passes.h"
#include "kiln/ir/print.h"
#include "kiln/ir/verify.h"
#include "kiln/ir/wire.h"
#include "kiln/runtime/artifact.h"
#include "kiln/runtime/cuda.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message);
}

// A graph and the symbol table it lives in; values and symbols handed to
// Python hold it, so neither outlives the table their nodes point into.
struct GraphState {
  explicit GraphState(std::shared_ptr<sym::SymbolTable> t) : table(std::move(t)), graph(*table) {}
  GraphState(std::shared_ptr<sym::SymbolTable> t, ir::Graph g)
      : table(std::move(t)), graph(std::move(g)) {}
  std::shared_ptr<sym::SymbolTable> table;
  ir::Graph graph;
};

// A symbolic integer (or boolean) of one graph's table.
struct PySym {
  std::shared_ptr<GraphState> owner;
  sym::Expr expr;
};

// One value of a graph, as call() takes it.
struct PyValue {
  std::shared_ptr<GraphState> owner;
  ir::ValueId id;
};

// --- Python values to IR values -------------------------------------------

DType parseDType(py::handle h) {
  std::string name = py::str(h);
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  for (int i = 0; i < kDTypeCount; ++i)
    if (dtypeName(static_cast<DType>(i)) == name) return static_cast<DType>(i);
  if (auto t = ir::dtypeFromName(name)) return *t;
  invalid(fmt::format("unknown dtype '{}'", name));
}

sym::Expr symOf(const GraphState& graph, py::handle h) {
  if (py::isinstance<PySym>(h)) {
    const PySym& s = h.cast<const PySym&>();
    if (s.owner->table != graph.table) invalid("a symbol of another graph");
    return s.expr;
  }
  if (py::isinstance<py::str>(h)) {
    std::string name = h.cast<std::string>();
    if (auto s = graph.table->lookup(name)) return *s;
    invalid(fmt::format("no symbol named '{}' (declare it with Graph.symbol)", name));
  }
  if (py::isinstance<py::int_>(h) && !py::isinstance<py::bool_>(h))
    return graph.table->integer(h.cast<int64_t>());
  invalid(fmt::format("expected an int or a symbol, got {}", std::string(py::repr(h))));
}

ir::Shape shapeOf(const GraphState& graph, py::handle list) {
  ir::Shape shape;
  for (py::handle item : list) shape.push_back(symOf(graph, item));
  return shape;
}

bool isIntLike(py::handle h) {
  return py::isinstance<py::int_>(h) && !py::isinstance<py::bool_>(h);
}

// An attribute value of the kind the schema wants; anything else is passed on
// as the closest AttrValue and the registry's check says what is wrong.
ir::AttrValue attrOf(const GraphState& graph, ir::ArgKind kind, py::handle h) {
  if (h.is_none()) return std::monostate{};
  if (kind == ir::ArgKind::DType) return parseDType(h);
  if (py::isinstance<py::bool_>(h)) return h.cast<bool>();
  if (isIntLike(h)) return h.cast<int64_t>();
  if (py::isinstance<py::float_>(h)) return h.cast<double>();
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  if (py::isinstance<PySym>(h)) return symOf(graph, h);
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    std::vector<int64_t> ints;
    bool allInts = true;
    for (py::handle item : h) {
      if (!isIntLike(item)) allInts = false;
      else ints.push_back(item.cast<int64_t>());
    }
    if (allInts) return ints;
    return shapeOf(graph, h);
  }
  if (std::string(py::str(py::type::handle_of(h).attr("__name__"))) == "dtype") return parseDType(h);
  invalid(fmt::format("cannot pass {} to the graph", std::string(py::repr(h))));
}

bool isInputKind(ir::ArgKind kind) {
  return kind == ir::ArgKind::Tensor || kind == ir::ArgKind::TensorList ||
         kind == ir::ArgKind::SymInt || kind == ir::ArgKind::Tuple;
}

// Binds Python arguments to the op's schema: graph values become inputs in
// schema order, everything else attributes named as in the schema.
PyValue call(const std::shared_ptr<GraphState>& graph, const std::string& opName,
                 py::args args, py::kwargs kwargs) {
  const ir::OpInfo& op = ir::getOp(opName);
  std::vector<ir::ValueId> inputs;
  std::vector<ir::Attr> attrs;
  auto valueId = [&](const ir::ArgSpec& spec, py::handle h) {
    const PyValue& v = h.cast<const PyValue&>();
    if (v.owner != graph)
      invalid(fmt::format("{}: argument '{}': a value of another graph", opName, spec.name));
    return v.id;
  };
  size_t next = 0;
  for (const ir::ArgSpec& spec : op.args) {
    py::object arg = py::none();
    bool given = false;
    if (next < args.size()) {
      arg = args[next++];
      given = true;
    } else if (kwargs.contains(spec.name.c_str())) {
      arg = kwargs[spec.name.c_str()];
      PyDict_DelItemString(kwargs.ptr(), spec.name.c_str());
      given = true;
    }
    bool mayBeInput = spec.kind == ir::ArgKind::Tensor || spec.kind == ir::ArgKind::Scalar;
    if ((!given || arg.is_none()) && spec.optional && mayBeInput) {
      attrs.push_back({spec.name, std::monostate{}}); // absent: later inputs bind past it
      continue;
    }
    if (!given) continue;
    if (spec.kind == ir::ArgKind::TensorList) {
      if (py::isinstance<PyValue>(arg)) invalid(fmt::format(
          "{}: argument '{}': expected a list of graph values", opName, spec.name));
      for (py::handle item : arg) {
        if (!py::isinstance<PyValue>(item))
          invalid(fmt::format("{}: argument '{}': expected graph values, got {}", opName,
                              spec.name, std::string(py::repr(item))));
        inputs.push_back(valueId(spec, item));
      }
    } else if (py::isinstance<PyValue>(arg)) {
      if (!isInputKind(spec.kind) && spec.kind != ir::ArgKind::Scalar)
        invalid(fmt::format("{}: argument '{}': expected {}, got a graph value", opName,
                            spec.name, ir::argKindName(spec.kind)));
      inputs.push_back(valueId(spec, arg));
    } else if (isInputKind(spec.kind)) {
      if (!arg.is_none())
        invalid(fmt::format("{}: argument '{}': expected a graph value, got {}", opName,
                            spec.name, std::string(py::repr(arg))));
    } else {
      try {
        attrs.push_back({spec.name, attrOf(*graph, spec.kind, arg)});
      } catch (const Error& e) {
        invalid(fmt::format("{}: argument '{}': {}", opName, spec.name, e.message()));
      }
    }
  }
  if (next < args.size())
    invalid(fmt::format("{}: takes {} arguments, got {}", opName, op.args.size(), args.size()));
  for (auto item : kwargs)
    invalid(fmt::format("{}: no argument named '{}'", opName, std::string(py::str(item.first))));
  return {graph, graph->graph.call(opName, std::move(inputs), std::move(attrs))};
}

// --- IR values to Python values ---------------------------------------------

py::object toPython(const std::shared_ptr<GraphState>& graph, sym::Expr e) {
  if (auto v = e.asInteger()) return py::int_(*v);
  if (auto b = e.asBoolean()) return py::bool_(*b);
  return py::cast(PySym{graph, e});
}

py::list toPython(const std::shared_ptr<GraphState>& graph, const ir::Shape& shape) {
  py::list out;
  for (sym::Expr e : shape) out.append(toPython(graph, e));
  return out;
}

py::object toPython(const std::shared_ptr<GraphState>& graph, const ir::AttrValue& v) {
  return std::visit(
      [&](const auto& x) -> py::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) return py::none();
        else if constexpr (std::is_same_v<T, sym::Expr>) return toPython(graph, x);
        else if constexpr (std::is_same_v<T, std::vector<sym::Expr>>) return toPython(graph, x);
        else if constexpr (std::is_same_v<T, DType>) return py::str(std::string(dtypeName(x)));
        else return py::cast(x);
      },
      v);
}

py::dict metaDict(const std::shared_ptr<GraphState>& graph, const ir::TensorMeta& meta) {
  py::dict out;
  out["dtype"] = std::string(dtypeName(meta.dtype));
  out["sizes"] = toPython(graph, meta.sizes);
  out["strides"] = toPython(graph, meta.strides);
  out["storage_offset"] = toPython(graph, meta.storageOffset);
  out["device"] = ir::toString(meta.device);
  out["requires_grad"] = meta.requiresGrad;
  return out;
}

// A tensor's meta dict, a tuple's list of them, or {"sym": ...}.
py::object valueInfo(const std::shared_ptr<GraphState>& graph, const ir::Value& value) {
  if (value.isTensor()) return metaDict(graph, value.tensor());
  if (value.isTuple()) {
    py::list out;
    for (const ir::TensorMeta& meta : value.tuple()) out.append(metaDict(graph, meta));
    return out;
  }
  py::dict out;
  out["sym"] = toPython(graph, value.symInt());
  return out;
}

// --- the interpreter on raw bytes -------------------------------------------

// A tensor as Python hands it over: dtype, sizes, strides, storage offset and
// the bytes of its storage (from the start up to its last element).
using RawTensor = std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>, int64_t,
                             py::buffer>;

ir::HostTensor hostTensor(const RawTensor& raw, size_t index) {
  const auto& [dtypeText, sizes, strides, offset, buffer] = raw;
  ir::HostTensor t;
  t.dtype = parseDType(py::str(dtypeText));
  t.sizes = sizes;
  t.strides = strides;
  t.storageOffset = offset;
  if (sizes.size() != strides.size())
    invalid(fmt::format("input {}: {} sizes but {} strides", index, sizes.size(), strides.size()));
  py::buffer_info info = buffer.request();
  size_t bytes = static_cast<size_t>(info.size * info.itemsize);
  int64_t last = offset;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) last = offset - 1;
    if (sizes[d] < 0 || strides[d] < 0)
      invalid(fmt::format("input {}: negative size or stride at dim {}", index, d));
  }
  if (last >= offset)
    for (size_t d = 0; d < sizes.size(); ++d) last += (sizes[d] - 1) * strides[d];
  if (last >= 0 && static_cast<size_t>(last + 1) * elementSize(t.dtype) > bytes)
    invalid(fmt::format("input {}: {} bytes do not hold element {}", index, bytes, last));
  t.storage = std::make_shared<std::vector<std::byte>>(bytes);
  if (bytes) std::memcpy(t.storage->data(), info.ptr, bytes);
  return t;
}

py::tuple rawTensor(const ir::HostTensor& t) {
  py::bytes bytes(reinterpret_cast<const char*>(t.storage ? t.storage->data() : nullptr),
                  t.storage ? t.storage->size() : 0);
  return py::make_tuple(std::string(dtypeName(t.dtype)), t.sizes, t.strides, t.storageOffset,
                        bytes);
}

py::list interpret(const GraphState& graph, const std::vector<RawTensor>& raw) {
  std::vector<ir::HostTensor> inputs;
  for (size_t i = 0; i < raw.size(); ++i) inputs.push_back(hostTensor(raw[i], i));
  std::vector<ir::HostTensor> outputs;
  {
    py::gil_scoped_release nogil;
    outputs = ir::interpret(graph.graph, std::move(inputs));
  }
  py::list out;
  for (const ir::HostTensor& t : outputs) out.append(rawTensor(t));
  return out;
}

// --- bindings ----------------------------------------------------------------

using GraphPtr = std::shared_ptr<GraphState>;

GraphPtr derived(const GraphPtr& graph, ir::Graph result) {
  return std::make_shared<GraphState>(graph->table, std::move(result));
}

PyValue placeholder(const GraphPtr& graph, const std::string& name, py::handle dtype,
                    py::handle sizes, py::handle strides, py::handle storageOffset,
                    const std::string& device, bool requiresGrad) {
  ir::TensorMeta meta;
  meta.dtype = parseDType(dtype);
  meta.sizes = shapeOf(*graph, sizes);
  meta.strides = strides.is_none() ? ir::contiguousStrides(meta.sizes, *graph->table)
                                   : shapeOf(*graph, strides);
  meta.storageOffset = symOf(*graph, storageOffset);
  if (device == "cuda" || device.rfind("cuda:", 0) == 0)
    meta.device = {ir::DeviceType::Cuda,
                   static_cast<int16_t>(device == "cuda" ? -1 : std::stoi(device.substr(5)))};
  else if (device != "cpu")
    invalid(fmt::format("unknown device '{}'", device));
  meta.requiresGrad = requiresGrad;
  if (meta.sizes.size() != meta.strides.size())
    invalid(fmt::format("placeholder '{}': {} sizes but {} strides", name, meta.sizes.size(),
                        meta.strides.size()));
  return {graph, graph->graph.placeholder(name, ir::Value(std::move(meta)))};
}

void bindSym(py::module_& m) {
  py::class_<PySym> cls(m, "Sym", "A symbolic integer of one graph: s0, 2*s0 + 1, ...");
  defSymArithmetic(cls, [](const PySym& a, sym::Expr e) { return PySym{a.owner, e}; },
                   [](const PySym& a, py::handle b) { return symOf(*a.owner, b); });
  cls
      .def("__neg__", [](const PySym& a) { return PySym{a.owner, -a.expr}; })
      .def("__eq__",
           [](const PySym& a, py::handle b) {
             if (!py::isinstance<PySym>(b) && !isIntLike(b)) return false;
             return a.expr == symOf(*a.owner, b);
           })
      .def("__hash__", [](const PySym& a) { return a.expr.hash(); })
      // Relations as boolean symbols (== and != are taken: structural equality):
      // conditions for _assert_scalar.
      .def("le", [](const PySym& a, py::handle b) { return PySym{a.owner, sym::le(a.expr, symOf(*a.owner, b))}; })
      .def("lt", [](const PySym& a, py::handle b) { return PySym{a.owner, sym::lt(a.expr, symOf(*a.owner, b))}; })
      .def("ge", [](const PySym& a, py::handle b) { return PySym{a.owner, sym::ge(a.expr, symOf(*a.owner, b))}; })
      .def("gt", [](const PySym& a, py::handle b) { return PySym{a.owner, sym::gt(a.expr, symOf(*a.owner, b))}; })
      .def("eq", [](const PySym& a, py::handle b) { return PySym{a.owner, sym::eq(a.expr, symOf(*a.owner, b))}; })
      .def("ne", [](const PySym& a, py::handle b) { return PySym{a.owner, sym::ne(a.expr, symOf(*a.owner, b))}; })
      .def("__str__", [](const PySym& a) { return sym::toString(a.expr); })
      .def("__repr__", [](const PySym& a) { return "Sym(" + sym::toString(a.expr) + ")"; })
      .def_property_readonly("range", [](const PySym& a) {
        sym::Range r = sym::range(a.expr);
        auto end = [](int64_t v, int64_t inf) { return v == inf ? py::object(py::none()) : py::int_(v); };
        return py::make_tuple(end(r.lo, sym::kNegInf), end(r.hi, sym::kInf));
      });
}

void bindValue(py::module_& m) {
  py::class_<PyValue>(m, "Value", "One value of a graph: pass it to Graph.call.")
      .def_property_readonly("id", [](const PyValue& v) { return v.id; })
      .def_property_readonly(
          "meta", [](const PyValue& v) { return valueInfo(v.owner, v.owner->graph.value(v.id)); },
          "dtype, sizes, strides, storage_offset, device, requires_grad; a list of those for a "
          "tuple; or {'sym': ...}")
      .def("__repr__", [](const PyValue& v) {
        return fmt::format("%{} : {}", v.id, ir::toString(v.owner->graph.value(v.id)));
      });
}

void bindGraph(py::module_& m) {
  py::class_<GraphState, GraphPtr>(m, "Graph", "A graph of libs/ir, built op by op.")
      .def(py::init([] { return std::make_shared<GraphState>(std::make_shared<sym::SymbolTable>()); }))
      .def(
          "symbol",
          [](const GraphPtr& g, const std::string& name, std::optional<int64_t> hint,
             std::optional<int64_t> lo, std::optional<int64_t> hi) {
            sym::Range range{lo.value_or(0), hi.value_or(sym::kInf)};
            return PySym{g, g->table->declare(name, hint, range)};
          },
          py::arg("name"), py::arg("hint") = py::none(), py::arg("min") = py::none(),
          py::arg("max") = py::none(),
          "A size symbol: backed when it has a hint, unbacked otherwise; in [min, max] "
          "(default [0, inf]).")
      .def(
          "unbacked", [](const GraphPtr& g) { return PySym{g, g->table->createUnbacked()}; },
          "A fresh unbacked symbol u<n>, unbounded: what item, nonzero and masked_select bind "
          "(their `symbol` argument); the op narrows its range.")
      .def("placeholder", &placeholder, py::arg("name"), py::arg("dtype"), py::arg("sizes"),
           py::arg("strides") = py::none(), py::arg("storage_offset") = 0,
           py::arg("device") = "cpu", py::arg("requires_grad") = false,
           "A tensor input; sizes and strides are ints or symbols (strides default to "
           "contiguous).")
      .def(
          "scalar_placeholder",
          [](const GraphPtr& g, const std::string& name, py::handle value) {
            return PyValue{g, g->graph.placeholder(name, ir::Value(symOf(*g, value)))};
          },
          py::arg("name"), py::arg("value"), "A symbolic-int input.")
      .def("call", &call, py::arg("op"),
           "Applies a registered op: graph values go to tensor arguments, other Python values "
           "(numbers, lists, dtypes, strings, symbols) are attributes; by position or name.")
      .def(
          "set_outputs",
          [](const GraphPtr& g, const std::vector<PyValue>& outputs) {
            std::vector<ir::ValueId> ids;
            for (const PyValue& v : outputs) {
              if (v.owner != g) invalid("set_outputs: a value of another graph");
              ids.push_back(v.id);
            }
            g->graph.setOutputs(std::move(ids));
          },
          py::arg("outputs"))
      .def_property_readonly("outputs",
                             [](const GraphPtr& g) {
                               std::vector<PyValue> out;
                               for (ir::ValueId id : g->graph.outputs()) out.push_back({g, id});
                               return out;
                             })
      .def("__len__", [](const GraphPtr& g) { return g->graph.size(); })
      .def(
          "value",
          [](const GraphPtr& g, ir::ValueId id) {
            g->graph.node(id); // range check
            return PyValue{g, id};
          },
          py::arg("id"))
      .def(
          "node",
          [](const GraphPtr& g, ir::ValueId id) {
            const ir::Node& node = g->graph.node(id);
            py::dict attrs;
            for (const ir::Attr& a : node.attrs) attrs[a.name.c_str()] = toPython(g, a.value);
            py::dict out;
            out["kind"] = node.kind == ir::NodeKind::Placeholder ? "placeholder" : "call";
            out["target"] = node.target;
            out["inputs"] = node.inputs;
            out["attrs"] = attrs;
            out["value"] = valueInfo(g, node.value);
            return out;
          },
          py::arg("id"), "kind, target, inputs (ids), attrs and value of one node.")
      .def("__str__", [](const GraphPtr& g) { return ir::print(g->graph); })
      .def("structural_hash", [](const GraphPtr& g) { return ir::structuralHash(g->graph); })
      .def("verify", [](const GraphPtr& g) { ir::verify(g->graph); })
      .def("dce", [](const GraphPtr& g) { return derived(g, ir::eliminateDeadCode(g->graph)); })
      .def("cse",
           [](const GraphPtr& g) { return derived(g, ir::eliminateCommonSubexpressions(g->graph)); })
      .def("decompose", [](const GraphPtr& g) { return derived(g, ir::decompose(g->graph)); })
      .def("to_bytes", [](const GraphPtr& g) { return py::bytes(ir::toBytes(g->graph)); },
           "The graph as a graph.capnp message.")
      .def_static(
          "from_bytes",
          [](const py::bytes& bytes) {
            auto table = std::make_shared<sym::SymbolTable>();
            ir::Graph graph = ir::fromBytes(std::string_view(bytes), *table);
            return std::make_shared<GraphState>(table, std::move(graph));
          },
          py::arg("data"), "A graph read from to_bytes' message, over a fresh symbol table.")
      .def("interpret", &interpret, py::arg("inputs"),
           "Runs the reference interpreter on (dtype, sizes, strides, storage_offset, buffer) "
           "inputs; returns outputs in the same form with bytes. Use kiln.ir.run instead.");
}

// --- A run's inputs ---------------------------------------------------------
// Read with the C API: a training step passes ~150 parameters, ~230 saved values
// to the backward, and the GPU waits for the first launch meanwhile.

// One input of an artifact's run.
struct RunInput {
  runtime::Tensor tensor;
  int device = -1; // -1: host memory
};

[[noreturn]] void badInput(size_t k, const std::string& what) {
  invalid(fmt::format("run input {}: {}", k, what));
}

// The ints of a sequence (a torch.Size, a tuple, a list).
std::vector<int64_t> intsOf(py::handle sequence, size_t k, const char* what) {
  py::object fast = py::reinterpret_steal<py::object>(PySequence_Fast(sequence.ptr(), ""));
  if (!fast) {
    PyErr_Clear();
    badInput(k, fmt::format("its {} are not a sequence of ints", what));
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
  PyObject** items = PySequence_Fast_ITEMS(fast.ptr());
  std::vector<int64_t> ints(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    long long v = PyLong_AsLongLong(items[i]);
    if (v == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      badInput(k, fmt::format("its {} are not a sequence of ints", what));
    }
    ints[static_cast<size_t>(i)] = v;
  }
  return ints;
}

int64_t intOf(py::handle value, size_t k, const char* what) {
  long long v = PyLong_AsLongLong(value.ptr());
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    badInput(k, fmt::format("its {} is not an int", what));
  }
  return v;
}

// A torch.dtype (by identity: torch's dtypes live as long as torch) as kiln's.
DType dtypeOfTorch(py::handle dtype) {
  static std::map<PyObject*, DType> known; // the GIL is held
  auto it = known.find(dtype.ptr());
  if (it != known.end()) return it->second;
  DType parsed = parseDType(dtype);
  dtype.inc_ref(); // kept: the map's key
  known.emplace(dtype.ptr(), parsed);
  return parsed;
}

RunInput readRunInput(py::handle item, size_t k) {
  RunInput in;
  runtime::Tensor& t = in.tensor;
  if (PyTuple_Check(item.ptr())) { // (dtype name, sizes, strides, address, device)
    py::tuple fields = py::reinterpret_borrow<py::tuple>(item);
    if (fields.size() != 5) badInput(k, "a tuple of (dtype, sizes, strides, address, device)");
    t.dtype = parseDType(fields[0]);
    t.sizes = intsOf(fields[1], k, "sizes");
    t.strides = intsOf(fields[2], k, "strides");
    t.data = reinterpret_cast<void*>(static_cast<uintptr_t>(intOf(fields[3], k, "address")));
    in.device = static_cast<int>(intOf(fields[4], k, "device"));
    return in;
  }
  // Interned names: CPython's attribute cache serves only those (a name made for
  // each lookup walks the type's dicts every time: ~3 us a tensor instead of ~1).
  static PyObject* const kDtype = PyUnicode_InternFromString("dtype");
  static PyObject* const kShape = PyUnicode_InternFromString("shape");
  static PyObject* const kStride = PyUnicode_InternFromString("stride");
  static PyObject* const kDataPtr = PyUnicode_InternFromString("data_ptr");
  static PyObject* const kGetDevice = PyUnicode_InternFromString("get_device");
  auto checked = [](PyObject* value) {
    if (!value) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(value);
  };
  auto get = [&](PyObject* name) { return checked(PyObject_GetAttr(item.ptr(), name)); };
  auto call = [&](PyObject* name) { return checked(PyObject_CallMethodNoArgs(item.ptr(), name)); };
  try { // a torch tensor
    t.dtype = dtypeOfTorch(get(kDtype));
    t.sizes = intsOf(get(kShape), k, "sizes");
    t.strides = intsOf(call(kStride), k, "strides");
    t.data = reinterpret_cast<void*>(
        static_cast<uintptr_t>(intOf(call(kDataPtr), k, "data_ptr()")));
    in.device = static_cast<int>(intOf(call(kGetDevice), k, "device"));
  } catch (const py::error_already_set&) {
    badInput(k, fmt::format("expected a tensor or a (dtype, sizes, strides, address, device) "
                            "tuple, got {}",
                            std::string(py::str(py::type::handle_of(item).attr("__name__")))));
  }
  if (t.strides.size() != t.sizes.size()) badInput(k, "as many strides as sizes expected");
  return in;
}

// An allocation's address: its data_ptr(), called by an interned name (a
// run makes hundreds of allocations).
std::byte* dataPtrOf(py::handle tensor) {
  static PyObject* const kDataPtr = PyUnicode_InternFromString("data_ptr");
  PyObject* address = PyObject_CallMethodNoArgs(tensor.ptr(), kDataPtr);
  if (!address) throw py::error_already_set();
  return reinterpret_cast<std::byte*>(py::reinterpret_steal<py::object>(address).cast<uintptr_t>());
}

std::vector<RunInput> readRunInputs(const py::sequence& inputs) {
  std::vector<RunInput> read;
  read.reserve(inputs.size());
  size_t k = 0;
  for (py::handle item : inputs) read.push_back(readRunInput(item, k++));
  return read;
}

// An artifact loaded in this process, run on tensors given by address; the
// plan's buffers come from a Python callable (kiln.ir passes one making torch
// tensors), so outputs are torch tensors without a copy.
class PyArtifact {
public:
  explicit PyArtifact(std::shared_ptr<runtime::LoadedArtifact> loaded)
      : loaded_(std::move(loaded)),
        dataDependent_(std::any_of(loaded_->artifact().plan.steps.begin(),
                                   loaded_->artifact().plan.steps.end(), runtime::bindsSymbol)) {}

  // inputs: torch tensors (their dtype, sizes, strides, data_ptr() and device
  // read here) or (dtype name, sizes, strides, data address, device) tuples
  // (kiln.ir.Kept's values), device -1 for host memory (CPU tensors, symbolic
  // ints) or the CUDA ordinal;
  // allocate: None for torch's allocator called from C++ (TorchBlock), or
  // allocate(nbytes) -> a uint8 tensor-like object with .data_ptr() (on the
  // device, for a CUDA artifact); `device` and `stream` (a CUstream address)
  // say where a CUDA artifact runs. Returns per output (dtype, sizes, strides,
  // base, element offset, value, input): `base` is the allocated object the
  // output views (offset None: `base` is the output itself, made by
  // allocate_output), or None when it views an input (then offset is an address
  // and `input` the graph input whose memory the plan's output buffer is,
  // where the plan says so, else None); `value` is a symbolic-int output's
  // value when it lies in host memory (CUDA), else None.
  //
  // `allocate_output`: None, or (nbytes, dtype name, sizes, strides) -> a tensor
  // of that layout, for a buffer the run hands out whole as one output
  // (Allocator::allocateOutput): the output is then that tensor, not a view of
  // bytes the caller builds.
  //
  // `donated`: None, or a list whose item k, where not None, is the allocation
  // (a tensor starting at input k's data) the caller gives up for this run:
  // a buffer the plan lets reuse input k's memory takes it (PlanBuffer::reuses).
  // The run holds the items meanwhile (the list's become None) and puts back
  // after it those it did not take.
  py::list run(const py::sequence& inputs, py::object allocate, int device, uintptr_t stream,
               py::object donated, py::object allocateOutput) {
    return runAndCapture(inputs, std::move(allocate), device, stream, std::move(donated),
                         std::move(allocateOutput))[0];
  }

  // As run, on a stream that captures a CUDA graph (torch.cuda.graph, relaxed mode):
  // (outputs, a ReplayStatus to tell before and after each replay, or None when no kernel
  // may fail).
  py::tuple runAndCapture(const py::sequence& inputs, py::object allocate, int device,
                          uintptr_t stream, py::object donated = py::none(),
                          py::object allocateOutput = py::none()) {
    std::vector<RunInput> read = readRunInputs(inputs);
    checkDevices(read, device);
    std::vector<runtime::Tensor> tensors;
    tensors.reserve(read.size());
    for (RunInput& input : read) tensors.push_back(std::move(input.tensor));
    PyAllocator allocator(std::move(allocate), std::move(allocateOutput),
                          loaded_->onCuda() ? device : -1);
    if (!donated.is_none()) allocator.take(donated.cast<py::list>());
    runtime::RunResult result;
    {
      std::optional<py::gil_scoped_release> nogil;
      if (mayWait()) nogil.emplace();
      result = loaded_->run(tensors, allocator, {device, reinterpret_cast<void*>(stream)});
    }
    if (!donated.is_none()) allocator.giveBack(donated.cast<py::list>());
    const std::vector<runtime::View>& views = loaded_->artifact().plan.outputs;
    py::list out;
    for (size_t k = 0; k < result.outputs.size(); ++k) {
      const runtime::Tensor& t = result.outputs[k];
      std::string dtype(dtypeName(t.dtype));
      if (loaded_->onCuda() && !views[k].symInt.isNull()) { // a host value, not device memory
        out.append(py::make_tuple(dtype, t.sizes, t.strides, py::none(), py::none(),
                                  *static_cast<const int64_t*>(t.data), py::none()));
        continue;
      }
      bool empty = std::find(t.sizes.begin(), t.sizes.end(), 0) != t.sizes.end();
      PyAllocator::Held held = allocator.owner(t, empty);
      int32_t input = held.object.is_none() ? inputOf(views[k].buffer) : -1;
      py::object at = py::none(); // None where the allocation is the output itself
      if (held.object.is_none())
        at = py::int_(reinterpret_cast<uintptr_t>(t.data));
      else if (!held.itself)
        at = py::int_(held.offset / elementSize(t.dtype));
      out.append(py::make_tuple(dtype, t.sizes, t.strides, held.object, at, py::none(),
                                input >= 0 ? py::object(py::int_(input)) : py::none()));
    }
    py::object status = py::none();
    if (result.replayStatus) status = py::cast(*result.replayStatus);
    return py::make_tuple(out, status);
  }

  // Whether a run may wait (for kernels of the CPU, the GPU, a library's setup)
  // long enough that other Python threads should run meanwhile: the GIL is let
  // go then. A warm CUDA run only queues work, and each of its allocations
  // calls back into Python: letting the GIL go for it makes every allocation a
  // handoff, which costs milliseconds a step where another thread wants the
  // GIL (Inductor's worker threads, once torch.compile ran, made a GPT-2
  // training step 2 ms slower). So a CUDA run holds the GIL unless it is the
  // artifact's first (module load, cuDNN plans, cuBLASLt heuristics) or reads
  // sizes from data (waits for the GPU).
  bool mayWait() {
    if (!loaded_->onCuda() || dataDependent()) return true;
    return !std::exchange(ranOnCuda_, true);
  }

  // The graph input whose memory a plan buffer is (itself, or the root an
  // in-place write lands in), or -1.
  int32_t inputOf(uint32_t buffer) const {
    const std::vector<runtime::PlanBuffer>& buffers = loaded_->artifact().plan.buffers;
    for (int32_t b = static_cast<int32_t>(buffer); b >= 0; b = buffers[b].aliasOf)
      if (buffers[b].input >= 0) return buffers[b].input;
    return -1;
  }

  std::string target() const { return loaded_->artifact().target; }
  std::string explain() const { return loaded_->artifact().explain; }
  std::string source() const { return loaded_->artifact().source; }
  std::string key() const { return loaded_->artifact().key; }
  // Whether a run waits for the GPU to read data-dependent sizes (item, nonzero steps).
  bool dataDependent() const { return dataDependent_; }
  std::vector<bool> symbolicInts() const {
    std::vector<bool> out;
    for (const auto& input : loaded_->artifact().plan.inputs) out.push_back(!input.isTensor());
    return out;
  }

private:
  // Tensors on the artifact's device, symbolic ints in host memory: a clear
  // error here rather than a fault in a kernel.
  void checkDevices(const std::vector<RunInput>& inputs, int device) const {
    const runtime::Plan& plan = loaded_->artifact().plan;
    bool cuda = loaded_->onCuda();
    auto on = [](int d) { return d < 0 ? std::string("cpu") : fmt::format("cuda:{}", d); };
    for (size_t k = 0; k < inputs.size() && k < plan.inputs.size(); ++k) {
      int where = inputs[k].device;
      if (!plan.inputs[k].isTensor()) {
        if (where >= 0)
          invalid(
              fmt::format("input {} is a symbolic int: pass an int or a CPU tensor, not one on {}",
                          k, on(where)));
        continue;
      }
      if (!cuda && where >= 0)
        invalid(
            fmt::format("input {} is on {}: this artifact was compiled for the CPU", k, on(where)));
      if (cuda && where != device)
        invalid(fmt::format("input {} is on {}: this artifact runs on cuda:{} ({})", k, on(where),
                            device, loaded_->artifact().target));
    }
  }

  // A run's memory: torch's allocator called from C++ (`make` None: TorchBlock, no
  // Python call and no GIL an allocation), or the caller's callables.
  class PyAllocator : public runtime::Allocator {
  public:
    PyAllocator(py::object make, py::object makeOutput, int device)
        : make_(std::move(make)), makeOutput_(std::move(makeOutput)), device_(device) {}
    ~PyAllocator() override {
      py::gil_scoped_acquire gil;
      owners_.clear();
      donated_.clear();
    }
    void* allocate(size_t bytes) override {
      if (make_.is_none()) return own(TorchBlock::bytes(bytes, device_), bytes, std::nullopt);
      py::gil_scoped_acquire gil;
      py::object tensor = make_(bytes);
      std::byte* data = dataPtrOf(tensor);
      owners_.insert_or_assign(data, Owner{bytes, std::move(tensor), {}, {}});
      return data;
    }
    // An output made as a tensor of its layout (makeOutput(bytes, dtype name, sizes, strides)).
    void* allocateOutput(size_t bytes, const runtime::Tensor& layout) override {
      if (make_.is_none())
        return own(TorchBlock::strided(layout.dtype, layout.sizes, layout.strides, device_), bytes,
                   layout);
      if (makeOutput_.is_none()) return allocate(bytes);
      py::gil_scoped_acquire gil;
      py::object tensor =
          makeOutput_(bytes, std::string(dtypeName(layout.dtype)), layout.sizes, layout.strides);
      std::byte* data = dataPtrOf(tensor);
      owners_.insert_or_assign(data, Owner{bytes, std::move(tensor), {}, layout});
      return data;
    }
    void release(void* data) override {
      auto it = owners_.find(static_cast<std::byte*>(data));
      if (it == owners_.end()) return;
      if (!it->second.object) { // a block no Python object holds yet
        owners_.erase(it);
        return;
      }
      py::gil_scoped_acquire gil;
      owners_.erase(it);
    }
    // The caller's donations (see run), held here while the run may take them.
    void take(py::list donated) {
      for (size_t k = 0; k < donated.size(); ++k) {
        donated_.push_back(donated[k]);
        donated[k] = py::none();
      }
    }
    void giveBack(py::list donated) {
      for (size_t k = 0; k < donated_.size() && k < donated.size(); ++k)
        donated[k] = std::move(donated_[k]);
      donated_.clear();
    }
    bool adopt(int32_t input, void* data, size_t bytes) override {
      py::gil_scoped_acquire gil;
      if (input < 0 || static_cast<size_t>(input) >= donated_.size() || donated_[input].is_none())
        return false;
      py::object owner = donated_[input];
      auto start = reinterpret_cast<uintptr_t>(dataPtrOf(owner));
      auto size =
          owner.attr("numel")().cast<size_t>() * owner.attr("element_size")().cast<size_t>();
      if (start != reinterpret_cast<uintptr_t>(data) || size < bytes) return false;
      owners_.insert_or_assign(static_cast<std::byte*>(data),
                               Owner{size, std::move(owner), {}, {}});
      donated_[input] = py::none();
      return true;
    }
    // The allocation holding a tensor's element 0: its object (None if not ours),
    // the byte offset in it, and whether the tensor is that object itself (all of
    // an allocateOutput tensor, in the layout it was made).
    struct Held {
      py::object object;
      size_t offset = 0;
      bool itself = false;
    };
    // Just past an allocation's end only for an empty view, and only where no
    // allocation starts there: torch's CUDA allocator carves neighbouring blocks
    // out of one segment, and an input (not ours) may start where ours ends.
    // (By address: a training step's run hands out ~230 outputs of ~300 allocations.)
    Held owner(const runtime::Tensor& t, bool empty) {
      auto* at = static_cast<std::byte*>(t.data);
      auto after = owners_.upper_bound(at); // the first allocation starting past `at`
      if (after == owners_.begin()) return {py::none()};
      auto& [begin, o] = *std::prev(after);
      if (at < begin + o.bytes || (empty && at == begin + o.bytes && !owners_.count(at))) {
        if (!o.object) o.object = o.block.python(); // one torch.Tensor for all outputs it holds
        const std::optional<runtime::Tensor>& made = o.madeAs;
        bool itself = at == begin && made && made->dtype == t.dtype && made->sizes == t.sizes &&
                      made->strides == t.strides;
        return {o.object, static_cast<size_t>(at - begin), itself};
      }
      return {py::none()};
    }

  private:
    struct Owner {
      size_t bytes;
      py::object object; // null for a block until an output needs it
      TorchBlock block;
      std::optional<runtime::Tensor> madeAs; // allocateOutput's: the tensor's layout
    };
    void* own(TorchBlock block, size_t bytes, std::optional<runtime::Tensor> madeAs) {
      std::byte* data = block.data();
      owners_.insert_or_assign(data,
                               Owner{bytes, py::object(), std::move(block), std::move(madeAs)});
      return data;
    }
    py::object make_;                    // None: TorchBlocks
    py::object makeOutput_;              // None: outputs as any memory
    int device_;                         // the blocks': the CUDA ordinal, or -1 for the CPU
    std::map<std::byte*, Owner> owners_; // by their first byte
    std::vector<py::object> donated_;    // per input: memory the caller gave up, or None
  };

  std::shared_ptr<runtime::LoadedArtifact> loaded_;
  bool dataDependent_;
  bool ranOnCuda_ = false; // (read and set under the GIL)
};

} // namespace

const ir::Graph& graphOf(py::handle graph) {
  if (!py::isinstance<GraphState>(graph)) throw py::type_error("expected a kiln.ir.Graph");
  return graph.cast<GraphState&>().graph;
}

void bindIr(py::module_& parent) {
  py::module_ m = parent.def_submodule("ir", "libs/ir: graphs and the reference interpreter.");
  bindSym(m);
  bindValue(m);
  bindGraph(m);
  py::class_<runtime::ReplayStatus>(m, "ReplayStatus",
                                    "The kernels' status words of a run captured into a CUDA graph.")
      .def(
          "replaying",
          [](const runtime::ReplayStatus& status) {
            py::gil_scoped_release nogil;
            status.replaying();
          },
          "Before queueing a replay: raises an earlier run's kernel error (waits for the "
          "graph's previous replay).")
      .def(
          "replayed",
          [](const runtime::ReplayStatus& status, int device, uintptr_t stream) {
            py::gil_scoped_release nogil;
            status.replayed({device, reinterpret_cast<void*>(stream)});
          },
          py::arg("device"), py::arg("stream"),
          "After queueing a replay: queues its check.");
  py::class_<PyArtifact>(m, "Artifact", "A compiled graph loaded in this process.")
      .def("capture", &PyArtifact::runAndCapture, py::arg("inputs"), py::arg("allocate"),
           py::arg("device"), py::arg("stream"), py::arg("donated") = py::none(),
           py::arg("allocate_output") = py::none())
      .def("run", &PyArtifact::run, py::arg("inputs"), py::arg("allocate"), py::arg("device") = 0,
           py::arg("stream") = 0, py::arg("donated") = py::none(),
           py::arg("allocate_output") = py::none(),
           "Runs on torch tensors or (dtype, sizes, strides, address, device) tuples; use "
           "kiln.ir.compile instead.")
      .def_property_readonly("target", &PyArtifact::target)
      .def_property_readonly("explain", &PyArtifact::explain)
      .def_property_readonly("source", &PyArtifact::source)
      .def_property_readonly("key", &PyArtifact::key)
      .def_property_readonly("data_dependent", &PyArtifact::dataDependent,
                             "Whether a run reads sizes from data on the host, waiting for the "
                             "GPU (not captured in CUDA graphs).")
      .def_property_readonly("symbolic_ints", &PyArtifact::symbolicInts,
                             "Per input: whether it is a symbolic int (else a tensor).");
  m.def(
      "check_cuda_errors",
      [] {
        py::gil_scoped_release nogil;
        runtime::checkCudaErrors();
      },
      "Waits for every CUDA run so far; raises the first kernel error not reported yet.");
  m.def(
      "load_artifact",
      [](const py::bytes& data, const std::string& dir) {
        std::string bytes = data;
        return PyArtifact(runtime::LoadedArtifact::load(bytes, dir));
      },
      py::arg("data"), py::arg("dir"),
      "Loads an artifact's bytes (its library written under `dir`).");
  // libs/autograd: the joint graph and its partition (python/kiln/autograd.py wraps them).
  auto jointInfo = [](const GraphPtr& g, const autograd::JointGraph& j) {
    py::dict out;
    out["graph"] = derived(g, j.graph);
    out["forward_nodes"] = j.forwardNodes;
    out["forward_outputs"] = j.forwardOutputs;
    out["tangent_of"] = j.tangentOf;
    out["grad_of"] = j.gradOf;
    return out;
  };
  m.def(
      "backward",
      [jointInfo](const GraphPtr& g, const std::vector<bool>& requiresGrad) {
        return jointInfo(g, autograd::backward(g->graph, requiresGrad));
      },
      py::arg("graph"), py::arg("requires_grad"),
      "The joint forward+backward graph: {graph, forward_nodes, forward_outputs, tangent_of, "
      "grad_of}.");
  m.def(
      "partition",
      [jointInfo](const GraphPtr& g, const std::vector<bool>& requiresGrad, double budget) {
        autograd::JointGraph j = autograd::backward(g->graph, requiresGrad);
        autograd::Partition p = autograd::partition(j, {budget});
        py::dict out;
        out["joint"] = jointInfo(g, j);
        out["forward"] = derived(g, std::move(p.forward));
        out["backward"] = derived(g, std::move(p.backward));
        out["saved"] = p.saved;
        out["recomputed"] = p.recomputed;
        out["forward_outputs"] = p.forwardOutputs;
        out["tangent_of"] = p.tangentOf;
        out["grad_of"] = p.gradOf;
        return out;
      },
      py::arg("graph"), py::arg("requires_grad"), py::arg("memory_budget") = 0.5,
      "backward, then the min-cut partition: {joint, forward, backward, saved, recomputed, "
      "forward_outputs, tangent_of, grad_of} (saved/recomputed: joint-graph ids).");
  m.def(
      "functionalize",
      [](const GraphPtr& g) {
        autograd::Functionalized f = autograd::functionalize(g->graph);
        py::dict out;
        out["graph"] = derived(g, std::move(f.graph));
        out["user_outputs"] = f.userOutputs;
        out["mutated_inputs"] = f.mutatedInputs;
        return out;
      },
      py::arg("graph"),
      "The graph without mutations: {graph, user_outputs, mutated_inputs}; its outputs are the "
      "original's, then each mutated input's new value.");
  m.def(
      "differentiability",
      [](const std::string& op) {
        switch (autograd::differentiability(op)) {
        case autograd::Differentiability::Rule: return "rule";
        case autograd::Differentiability::Decompose: return "decompose";
        case autograd::Differentiability::None: return "none";
        default: return "unsupported";
        }
      },
      py::arg("op"), "'rule', 'decompose' (through its decomposition), 'none' or 'unsupported'.");
  m.def("differentiable_ops", &autograd::differentiableOps,
        "Ops with a derivative rule or differentiated through their decomposition, sorted.");
  m.def("op_names", &ir::opNames, "Every registered op, sorted.");
  m.def(
      "op_schema",
      [](const std::string& name) {
        py::list args;
        for (const ir::ArgSpec& a : ir::getOp(name).args) {
          py::dict arg;
          arg["name"] = a.name;
          arg["kind"] = std::string(ir::argKindName(a.kind));
          arg["optional"] = a.optional;
          if (!std::holds_alternative<std::monostate>(a.defaultValue))
            arg["default"] = toPython(nullptr, a.defaultValue);
          args.append(arg);
        }
        return args;
      },
      py::arg("op"), "The op's arguments: name, kind, optional and default.");
}

} // namespace kiln::python
