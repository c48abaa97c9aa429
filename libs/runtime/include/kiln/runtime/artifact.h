// A compiled graph as the codegen service hands it out (schemas/codegen.capnp):
// the plan, the generated source, the compiled library's bytes and the
// explain view; and an artifact loaded for running.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "kiln/runtime/plan.h"
#include "kiln/runtime/runtime.h"
#include "kiln/schema/codegen.capnp.h"

namespace kiln::runtime {

struct Artifact {
  std::string target; // "cpu"
  std::string key;    // what the cache stores it under
  Plan plan;
  std::string source;
  std::string library; // the shared object's bytes
  std::string explain;
};

void toWire(const Artifact& artifact, schema::Artifact::Builder out);
// Symbols are declared in `table`. Error{Malformed} for anything invalid.
Artifact fromWire(schema::Artifact::Reader in, sym::SymbolTable& table);
std::string toBytes(const Artifact& artifact);
Artifact fromBytes(std::string_view bytes, sym::SymbolTable& table);

// A shared object of kernels, loaded with dlopen; unloaded with its last owner.
class Library {
public:
  static std::shared_ptr<Library> load(const std::string& path); // Error{NotFound}
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  KernelFn kernel(const std::string& name) const; // Error{NotFound} when absent

private:
  explicit Library(void* handle) : handle_(handle) {}
  void* handle_;
};

// An artifact ready to run: its library written under `dir` (named by the
// artifact's key, written atomically, reused when present) and loaded.
class LoadedArtifact {
public:
  static std::shared_ptr<LoadedArtifact> load(std::string_view bytes, const std::string& dir);

  const Artifact& artifact() const { return artifact_; }
  RunResult run(const std::vector<Tensor>& inputs, Allocator& allocator) const;

private:
  LoadedArtifact() = default;
  std::unique_ptr<sym::SymbolTable> table_;
  Artifact artifact_;
  std::shared_ptr<Library> library_;
};

} // namespace kiln::runtime
