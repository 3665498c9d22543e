#pragma once
// The TorchScript source files of interop/script, embedded in the library at build time
// (cmake/embed_scripts.cmake), so an export needs no source tree.

#include <string_view>
#include <vector>

namespace zoo {

struct ScriptFile {
  std::string_view name;  // "common.py", ...
  std::string_view text;  // the whole file
};

// Every file of interop/script, in the order CMakeLists.txt lists them.
const std::vector<ScriptFile>& script_files();

}  // namespace zoo
