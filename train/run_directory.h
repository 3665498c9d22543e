#pragma once
// A training run's directory and its checkpoints, apart from the training loop:
//   RUN_DIR/run.yaml          the resolved run config (paths absolute: resumes from anywhere)
//   RUN_DIR/tokenizer.model   the run's tokenizer (zoo's; a Hugging Face one in RUN_DIR/tokenizer/)
//   RUN_DIR/data/             token files made from the run's text
//   RUN_DIR/metrics.jsonl     one JSON record per step and evaluation
//   RUN_DIR/checkpoints/step-N, `last` and `best` links to them
// A fresh run refuses a directory that holds another run (unless overwriting) or anything zoo
// did not write; a directory this run created is removed again when setting the run up fails.
// A checkpoint is complete before `last` or `best` points at it, so a failed or killed save
// leaves the previous checkpoint and the links as they were.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "core/outputs.h"

namespace zoo {

class RunDirectory {
 public:
  enum class Mode { kFresh, kResume };
  // `writer`: this process writes the directory (rank 0 of a data-parallel run); the others
  // only read what it wrote. Throws naming the directory when it may not be used for `mode`.
  RunDirectory(std::string path, Mode mode, bool overwrite, bool writer, std::ostream& log);

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const;  // RUN_DIR/name
  std::string checkpoints() const;
  std::string checkpoint(int64_t step) const;        // RUN_DIR/checkpoints/step-N
  // The checkpoint `last` points to; throws "nothing to resume" when there is none.
  std::string last_checkpoint() const;

  // After a checkpoint directory was written whole: points `last` (and `best`) at it and removes
  // all but the newest `keep_last` and `best_step`'s. Throws naming the link when it cannot.
  void commit_checkpoint(int64_t step, bool is_best, int64_t keep_last, std::optional<int64_t> best_step);

  // The run is set up: from here on its directory stays even if the command fails.
  void keep() {
    if (created_) created_->keep();
  }

  // Lets another process use the directory (the run is over); the destructor does it too.
  void release() { lock_.reset(); }

  // The lock file a writer holds (RUN_DIR/train.lock).
  static constexpr const char* kLockFile = "train.lock";

 private:
  std::string path_;
  std::optional<CreatedDirectory> created_;
  std::shared_ptr<void> lock_;  // after created_: released before a failed setup removes the folder
};

// The step of a checkpoint directory named step-N, or -1.
int64_t checkpoint_step(const std::string& dir);

// Where a checkpoint path leads: a checkpoint directory itself, or a run directory (its best
// checkpoint, else its last). Throws naming the path when it is neither.
std::string resolve_checkpoint(const std::string& path);

}  // namespace zoo
