// Cap'n Proto messages as plain Python values, through capnp's reflection:
// a struct is a dict of its fields (a union's member is the one key present;
// Void is None), a list a list, an enum its name, Data bytes. The SDK builds
// its tracer requests this way (python/kiln/_trace.py) instead of a second
// hand-written wire format.
#include "capnp_dict.h"

#include <capnp/dynamic.h>
#include <capnp/message.h>
#include <capnp/schema.h>
#include <capnp/serialize.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>

#include "kiln/common/error.h"
#include "kiln/schema/graph.capnp.h"
#include "kiln/schema/guards.capnp.h"
#include "kiln/schema/program.capnp.h"
#include "kiln/schema/shapes.capnp.h"
#include "kiln/schema/tracer.capnp.h"
#include "kiln/tracer/tracer.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

capnp::StructSchema schemaNamed(const std::string& name) {
  static const std::map<std::string, capnp::StructSchema> schemas = {
      {"TraceRequest", capnp::Schema::from<schema::TraceRequest>()},
      {"TraceReply", capnp::Schema::from<schema::TraceReply>()},
      {"GuardSet", capnp::Schema::from<schema::GuardSet>()},
      {"FrameState", capnp::Schema::from<schema::FrameState>()},
      {"CallInput", capnp::Schema::from<schema::CallInput>()},
      {"Graph", capnp::Schema::from<schema::Graph>()},
      {"Program", capnp::Schema::from<schema::Program>()},
      {"OutputSpec", capnp::Schema::from<schema::OutputSpec>()},
      {"ObjectDesc", capnp::Schema::from<schema::ObjectDesc>()},
      {"TensorData", capnp::Schema::from<schema::TensorData>()},
      {"CheckConstraintsReply", capnp::Schema::from<schema::CheckConstraintsReply>()},
  };
  auto it = schemas.find(name);
  if (it == schemas.end()) throw Error(ErrorCode::InvalidArgument, "no message type " + name);
  return it->second;
}

[[noreturn]] void wrong(const std::string& where, const std::string& what) {
  throw Error(ErrorCode::InvalidArgument, where + ": " + what);
}

void fill(capnp::DynamicStruct::Builder out, py::handle value, const std::string& where);

// A value of `type` from a Python value, for a list element or a field.
capnp::DynamicValue::Reader scalar(capnp::Type type, py::handle v, const std::string& where, std::string& keep) {
  switch (type.which()) {
  case capnp::schema::Type::VOID: return capnp::VOID;
  case capnp::schema::Type::BOOL: return v.cast<bool>();
  case capnp::schema::Type::INT8:
  case capnp::schema::Type::INT16:
  case capnp::schema::Type::INT32:
  case capnp::schema::Type::INT64: return v.cast<int64_t>();
  case capnp::schema::Type::UINT8:
  case capnp::schema::Type::UINT16:
  case capnp::schema::Type::UINT32:
  case capnp::schema::Type::UINT64: return v.cast<uint64_t>();
  case capnp::schema::Type::FLOAT32:
  case capnp::schema::Type::FLOAT64: return v.cast<double>();
  case capnp::schema::Type::TEXT:
    keep = v.cast<std::string>();
    return capnp::Text::Reader(keep.c_str(), keep.size());
  case capnp::schema::Type::DATA:
    keep = v.cast<std::string>();
    return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(keep.data()), keep.size());
  case capnp::schema::Type::ENUM: {
    std::string name = v.cast<std::string>();
    KJ_IF_MAYBE(e, type.asEnum().findEnumerantByName(name)) { return capnp::DynamicEnum(*e); }
    wrong(where, "no enumerant " + name);
  }
  default: wrong(where, "not a scalar type");
  }
}

void fillList(capnp::DynamicList::Builder list, py::handle value, const std::string& where) {
  capnp::Type element = list.getSchema().getElementType();
  unsigned k = 0;
  for (py::handle item : value) {
    std::string at = where + "[" + std::to_string(k) + "]";
    if (element.isStruct()) {
      fill(list[k].as<capnp::DynamicStruct>(), item, at);
    } else if (element.isList()) {
      fillList(list.init(k, static_cast<unsigned>(py::len(item))).as<capnp::DynamicList>(), item, at);
    } else {
      std::string keep;
      list.set(k, scalar(element, item, at, keep));
    }
    ++k;
  }
}

void fill(capnp::DynamicStruct::Builder out, py::handle value, const std::string& where) {
  if (!py::isinstance<py::dict>(value)) wrong(where, "expected a dict");
  for (auto [k, v] : value.cast<py::dict>()) {
    std::string name = k.cast<std::string>(), at = where + "." + name;
    KJ_IF_MAYBE(field, out.getSchema().findFieldByName(name)) {
      capnp::Type type = field->getType();
      if (field->getProto().isGroup()) {
        fill(out.init(*field).as<capnp::DynamicStruct>(), v, at);
      } else if (type.isStruct()) {
        fill(out.init(*field).as<capnp::DynamicStruct>(), v, at);
      } else if (type.isList()) {
        fillList(out.init(*field, static_cast<unsigned>(py::len(v))).as<capnp::DynamicList>(), v, at);
      } else {
        std::string keep;
        out.set(*field, scalar(type, v, at, keep));
      }
    } else {
      wrong(where, "no field " + name);
    }
  }
}

py::object toPython(capnp::DynamicValue::Reader v);

py::object toPython(capnp::DynamicStruct::Reader s) {
  py::dict out;
  auto add = [&](capnp::StructSchema::Field f) {
    out[py::str(f.getProto().getName().cStr())] = toPython(s.get(f));
  };
  for (auto f : s.getSchema().getNonUnionFields()) add(f);
  KJ_IF_MAYBE(member, s.which()) { add(*member); }
  return out;
}

py::object toPython(capnp::DynamicValue::Reader v) {
  switch (v.getType()) {
  case capnp::DynamicValue::VOID: return py::none();
  case capnp::DynamicValue::BOOL: return py::bool_(v.as<bool>());
  case capnp::DynamicValue::INT: return py::int_(v.as<int64_t>());
  case capnp::DynamicValue::UINT: return py::int_(v.as<uint64_t>());
  case capnp::DynamicValue::FLOAT: return py::float_(v.as<double>());
  case capnp::DynamicValue::TEXT: return py::str(v.as<capnp::Text>().cStr());
  case capnp::DynamicValue::DATA: {
    auto d = v.as<capnp::Data>();
    return py::bytes(reinterpret_cast<const char*>(d.begin()), d.size());
  }
  case capnp::DynamicValue::LIST: {
    py::list out;
    for (auto item : v.as<capnp::DynamicList>()) out.append(toPython(item));
    return out;
  }
  case capnp::DynamicValue::ENUM: {
    KJ_IF_MAYBE(e, v.as<capnp::DynamicEnum>().getEnumerant()) { return py::str(e->getProto().getName().cStr()); }
    return py::int_(v.as<capnp::DynamicEnum>().getRaw());
  }
  case capnp::DynamicValue::STRUCT: return toPython(v.as<capnp::DynamicStruct>());
  default: return py::none();
  }
}

py::bytes encode(const std::string& type, py::handle value) {
  capnp::MallocMessageBuilder message;
  fill(message.initRoot<capnp::DynamicStruct>(schemaNamed(type)), value, type);
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return py::bytes(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

} // namespace

py::object capnpDecode(const std::string& type, const std::string& bytes) {
  if (bytes.size() % sizeof(capnp::word) != 0) throw Error(ErrorCode::Malformed, type + ": not whole words");
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  capnp::ReaderOptions options;
  options.traversalLimitInWords = uint64_t{1} << 27;
  options.nestingLimit = 256;
  try {
    capnp::FlatArrayMessageReader message(words, options);
    return toPython(message.getRoot<capnp::DynamicStruct>(schemaNamed(type)));
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::Malformed, type + ": " + e.getDescription().cStr());
  }
}

void bindCapnp(py::module_& m) {
  m.def("capnp_encode", &encode, py::arg("type"), py::arg("value"),
        "A message of `type` (TraceRequest, GuardSet, ...) from nested dicts, as bytes.");
  m.def("capnp_decode", &capnpDecode, py::arg("type"), py::arg("data"), "A message's bytes as nested dicts.");
  m.def(
      "trace",
      [](const std::string& request) {
        std::string reply;
        {
          py::gil_scoped_release nogil;
          reply = tracer::trace(request);
        }
        return py::bytes(reply);
      },
      py::arg("request"), "Runs the tracer in-process on a TraceRequest message; returns the TraceReply.");
}

} // namespace kiln::python
