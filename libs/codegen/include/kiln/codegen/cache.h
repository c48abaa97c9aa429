// The artifact cache: compiled artifacts on disk by content key, shared by
// every codegen worker of a host. Entries are written under a temporary name
// and renamed (a reader never sees half a file; two workers writing the same
// key write the same bytes), and carry a length and checksum that every read
// verifies: a corrupted entry is removed and rebuilt, never loaded.
#pragma once

#include <optional>
#include <string>

#include "kiln/ir/graph.h"

namespace kiln::codegen {

// $KILN_CACHE_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/kiln.
std::string defaultCacheDir();

class ArtifactCache {
public:
  explicit ArtifactCache(std::string dir); // created if missing (Error{Io} when it cannot be)

  // The artifact bytes stored under `key`, if a whole, intact entry is there.
  std::optional<std::string> get(const std::string& key);
  void put(const std::string& key, const std::string& bytes);

  std::string pathOf(const std::string& key) const;
  const std::string& dir() const { return dir_; }

private:
  std::string dir_;
};

struct CompileResult {
  std::string artifact; // runtime::Artifact as bytes (schemas/codegen.capnp)
  bool cacheHit = false;
};

// The artifact of `graph` for `target`: from the cache when there, else
// compiled (codegen/compile.h) and stored.
CompileResult compileCached(const ir::Graph& graph, const std::string& target,
                            ArtifactCache& cache);

} // namespace kiln::codegen
