// What every benchmark's results file holds besides its numbers: where it goes,
// when and where it was measured, and from which commit.
#pragma once

#include <string>

namespace kiln::bench {

// <source>/bench/results/<name>-<kind>-<date>.json; kind defaults to "<nproc>cpu".
std::string defaultResultPath(const std::string& name, const std::string& kind);

// The opening lines of a results object (after "{"): benchmark, date, machine
// (hostname, nproc, cpu), commit and dirty, each ending in ",\n". Call it
// before the results file exists, so that the file does not count as a change.
std::string resultHeader(const std::string& benchmark);

// `text` as a JSON string literal.
std::string jsonString(const std::string& text);

} // namespace kiln::bench
