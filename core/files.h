#pragma once
// File helpers with the project's error conventions: messages name the path.

#include <string>

namespace zoo {

// The whole file. Throws std::runtime_error naming the path when it cannot be read.
std::string read_file(const std::string& path);

// Writes `bytes` to `path` through a temporary file in the same folder, then a rename, so no
// reader ever sees a half-written file and a failure leaves no partial file behind.
void write_file_atomically(const std::string& path, const std::string& bytes);

// A unique temporary name beside `path` for writers that produce the file themselves; the
// caller renames it into place (std::filesystem::rename) or removes it.
std::string temporary_path_for(const std::string& path);

}  // namespace zoo
