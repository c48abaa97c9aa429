// _kiln.Program: an exported program (libs/program) for kiln.ExportedProgram —
// read, written, described and checked in C++, so Python and the C++ SDK accept
// and refuse the same calls with the same words.
#include "program_bindings.h"

#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "capnp_dict.h"
#include "kiln/common/error.h"
#include "kiln/ir/dtype.h"
#include "kiln/ir/wire.h"
#include "kiln/program/program.h"
#include "kiln/schema/program.capnp.h"
#include "kiln/sym/print.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

using program::Program;
using ProgramPtr = std::shared_ptr<Program>;

DType dtypeNamed(const std::string& name) {
  for (int k = 0; k < kDTypeCount; ++k)
    if (dtypeName(static_cast<DType>(k)) == name) return static_cast<DType>(k);
  throw Error(ErrorCode::InvalidArgument, "unknown dtype '" + name + "'");
}

ir::Device deviceNamed(const std::string& name) {
  if (name == "cpu") return {};
  if (name == "cuda") return {ir::DeviceType::Cuda, -1};
  if (name.rfind("cuda:", 0) == 0)
    return {ir::DeviceType::Cuda, static_cast<int16_t>(std::stoi(name.substr(5)))};
  throw Error(ErrorCode::InvalidArgument, "unknown device '" + name + "'");
}

py::object bound(int64_t v, int64_t inf) {
  return v == inf ? py::object(py::none()) : py::int_(v);
}

// A step as kiln._trace spells paths (the tracer request's GuardStep dicts).
py::dict stepDict(const guards::Step& step) {
  using guards::StepKind;
  static const char* const names[] = {"arg", "kwarg",  "global", "closure", "attr",    "index",
                                      "key", "intKey", "size",   "stride",  "default", "kwDefault",
                                      "value", "hasAttr", "module", "classAttr"};
  py::dict d;
  const char* kind = names[static_cast<int>(step.kind)];
  switch (step.kind) {
  case StepKind::Kwarg:
  case StepKind::Global:
  case StepKind::Attr:
  case StepKind::Key:
  case StepKind::KwDefault:
  case StepKind::HasAttr:
  case StepKind::Module:
  case StepKind::Value: d[kind] = py::none(); break;
  default: d[kind] = step.index; break;
  }
  if (!step.name.empty()) d["name"] = step.name;
  return d;
}

py::list inputsOf(const Program& p) {
  py::list out;
  for (const program::Input& in : p.inputs()) {
    const ir::TensorMeta& m = p.graph().meta(in.placeholder);
    py::list sizes;
    for (sym::Expr s : m.sizes) {
      if (auto v = s.asInteger())
        sizes.append(*v);
      else
        sizes.append(sym::toString(s));
    }
    py::dict d;
    d["name"] = in.name;
    d["source"] = in.source;
    d["dtype"] = std::string(dtypeName(m.dtype));
    d["device"] = ir::toString(m.device);
    d["sizes"] = sizes;
    d["stored"] = in.constant.has_value();
    py::list path;
    for (const guards::Step& step : in.path) path.append(stepDict(step));
    d["path"] = path;
    out.append(d);
  }
  return out;
}

} // namespace

void bindProgram(py::module_& m) {
  m.attr("PROGRAM_MAGIC") = py::int_(schema::PROGRAM_MAGIC);
  m.attr("PROGRAM_FORMAT_VERSION") = py::int_(schema::PROGRAM_FORMAT_VERSION);
  py::class_<Program, ProgramPtr>(m, "Program",
                                  "An exported program (libs/program): a `.kiln` file's contents.")
      .def_static(
          "from_bytes",
          [](const py::bytes& bytes) {
            return std::make_shared<Program>(Program::fromBytes(std::string(bytes)));
          },
          py::arg("data"),
          "Reads a program; KilnError malformed / unsupported (another format version).")
      .def_static(
          "load",
          [](const std::string& path) {
            py::gil_scoped_release nogil;
            return std::make_shared<Program>(Program::load(path));
          },
          py::arg("path"),
          "Reads a `.kiln` file; KilnError not_found / io / malformed / unsupported.")
      .def("to_bytes", [](const Program& p) { return py::bytes(p.toBytes()); })
      .def(
          "save",
          [](const Program& p, const std::string& path) {
            py::gil_scoped_release nogil;
            p.save(path);
          },
          py::arg("path"), "Writes the `.kiln` file (atomically).")
      .def_property_readonly("name", &Program::name)
      .def_property_readonly("graph",
                             [](const Program& p) {
                               return py::module_::import("kiln.ir").attr("Graph").attr(
                                   "from_bytes")(py::bytes(ir::toBytes(p.graph())));
                             })
      .def_property_readonly(
          "inputs", &inputsOf,
          "One dict per graph placeholder: name, source, dtype, device, sizes (ints, "
          "and symbol names), stored (the program carries it).")
      .def_property_readonly("symbols",
                             [](const Program& p) {
                               py::list out;
                               for (const program::Symbol& s : p.symbols()) {
                                 py::dict d;
                                 d["name"] = s.symbol.name();
                                 d["dim"] = s.dim;
                                 d["source"] = s.source;
                                 d["min"] = bound(s.range.lo, sym::kNegInf);
                                 d["max"] = bound(s.range.hi, sym::kInf);
                                 out.append(d);
                               }
                               return out;
                             })
      .def_property_readonly("asserts",
                             [](const Program& p) {
                               py::list out;
                               for (const program::RuntimeAssert& a : p.asserts())
                                 out.append(py::make_tuple(sym::toString(a.condition), a.message));
                               return out;
                             })
      .def_property_readonly("output_spec",
                             [](const Program& p) -> py::object {
                               if (p.outputSpec().empty()) return py::none();
                               return capnpDecode("OutputSpec", p.outputSpec());
                             })
      .def(
          "stored",
          [](const Program& p, size_t input) {
            const program::Input& in = p.inputs().at(input);
            if (!in.constant)
              throw Error(ErrorCode::InvalidArgument, "input " + in.name + " is the caller's");
            return py::make_tuple(std::string(dtypeName(in.constant->dtype)), in.constant->sizes,
                                  py::bytes(in.constant->bytes));
          },
          py::arg("input"), "A stored input's (dtype, sizes, bytes).")
      .def(
          "check",
          [](const Program& p,
             const std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>& given) {
            std::vector<program::InputShape> shapes;
            for (const auto& [dtype, device, sizes] : given)
              shapes.push_back({dtypeNamed(dtype), deviceNamed(device), sizes});
            py::dict out;
            for (const auto& [symbol, value] : p.check(shapes)) out[py::str(symbol.name())] = value;
            return out;
          },
          py::arg("inputs"),
          "Checks a call's user inputs ((dtype, device, sizes) each) against the spec and the "
          "runtime asserts; returns the symbols' values, or raises KilnError(invalid_argument).")
      .def("__str__", &Program::text);
}

} // namespace kiln::python
