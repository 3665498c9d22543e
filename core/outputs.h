#pragma once
// The one rule for every path zoo writes on a user's behalf (--out, --run-dir): zoo never
// replaces what it did not write.
//   - A path that does not exist, or an empty directory where a directory is wanted, is written.
//   - A directory where a file is wanted, or a file where a directory is wanted, is refused.
//   - zoo's own output of the same kind (recognised by its files) is replaced only with
//     --overwrite, and the command says what it replaced.
//   - Anything else is refused, --overwrite or not, naming the path and what it holds.
// Directories zoo writes carry a marker file (kOutputMarker) saying what they are; checkpoints,
// runs and token directories written before the marker are recognised by their files.

#include <functional>
#include <string>

namespace zoo {

enum class OutputKind {
  kCheckpoint,             // a checkpoint directory (config.yaml, model.pt, state.json)
  kRunDirectory,           // a training run (run.yaml, checkpoints/, metrics.jsonl)
  kTokenDirectory,         // token files (train.tokens, val.tokens)
  kHuggingFaceDirectory,   // config.json + safetensors written by export-hf
  kPeftAdapterDirectory,   // adapter_config.json + adapter_model.safetensors (export-hf --adapters-only)
  kTorchScriptFile,        // an archive written by zoo export (zoo.json inside)
  kTokenizerModel,         // a SentencePiece model trained by zoo
  kImageFile,              // a PNG written by zoo plot
};

// What a kind is called in messages ("a zoo checkpoint").
std::string describe(OutputKind kind);
bool is_directory_kind(OutputKind kind);

inline constexpr const char* kOutputMarker = ".zoo-output";

// Whether `path` holds zoo's own output of `kind` (by its marker, or its files).
bool holds_own_output(const std::string& path, OutputKind kind);

enum class OutputState {
  kNew,       // nothing there (or an empty directory): write it
  kReplace,   // zoo's own output of this kind, and --overwrite was given: replace it
};

// Applies the rule above. Throws std::runtime_error starting with `path` when the path may not
// be written; otherwise says whether it is new or replaced (the caller prints "replaced ...").
OutputState check_output(const std::string& path, OutputKind kind, bool overwrite);

// Writes the marker of `kind` into the directory `dir`.
void write_output_marker(const std::string& dir, OutputKind kind);

// Writes the directory `dir` whole: `fill` writes into a temporary directory beside it, which
// gets the marker of `kind` and is renamed into place (replacing an earlier output). On failure
// the temporary is removed and the error names `dir`, not the temporary.
void write_output_directory(const std::string& dir, OutputKind kind,
                            const std::function<void(const std::string& tmp)>& fill);

// A directory this command may create. When it did not exist before and the command fails
// (the object is destroyed while an exception propagates) before `keep()`, it is removed with
// everything in it: a failed command leaves nothing half-written behind.
class CreatedDirectory {
 public:
  explicit CreatedDirectory(std::string path);
  ~CreatedDirectory();
  CreatedDirectory(const CreatedDirectory&) = delete;
  CreatedDirectory& operator=(const CreatedDirectory&) = delete;
  bool created() const { return created_; }
  void keep() { kept_ = true; }
  const std::string& path() const { return path_; }

 private:
  std::string path_, top_;
  bool created_ = false, kept_ = false;
  int exceptions_at_start_ = 0;
};

}  // namespace zoo
