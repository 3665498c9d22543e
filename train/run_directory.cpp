#include "train/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <stdexcept>
#include <vector>

#include "core/files.h"
#include "core/strings.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}

// Replaces `link` by a symbolic link to `target` (a sibling name) atomically.
void point_link(const fs::path& link, const std::string& target) {
  const std::string tmp = temporary_path_for(link.string());
  if (::symlink(target.c_str(), tmp.c_str()) != 0 || ::rename(tmp.c_str(), link.c_str()) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(link.string() + ": cannot point it at " + target + ": " +
                             describe_write_error(link.string(), error));
  }
}

// Removes what zoo wrote in a run's checkpoints/ (its step-N checkpoints, the last and best
// links, its temporaries) and keeps anything else there, saying so: --overwrite replaces zoo's
// output, never a file a user put beside it.
void remove_own_checkpoints(const fs::path& dir, std::ostream& log) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return;
  remove_stale_temporaries(dir.string());
  std::vector<std::string> kept;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool link = entry.is_symlink() && (name == "last" || name == "best");
    const bool checkpoint = !entry.is_symlink() && entry.is_directory() && checkpoint_step(name) >= 0 &&
                            holds_own_output(entry.path().string(), OutputKind::kCheckpoint);
    if (link) fs::remove(entry.path(), ec);
    else if (checkpoint) remove_whole(entry.path().string());
    else kept.push_back(name);
  }
  if (kept.empty()) {
    fs::remove(dir, ec);
  } else {
    std::sort(kept.begin(), kept.end());
    log << "kept what zoo did not write in " << dir.string() << ": " << join(kept) << "\n";
  }
}

// Locks the run directory for this process: an advisory lock (flock) on RUN/train.lock, which
// the system releases however the process ends, so a second zoo train or finetune on the same
// directory is refused by name rather than writing beside the first. The file holds the PID
// while locked and is emptied on a normal release, so a PID found there means its process died.
std::shared_ptr<void> lock_run(const std::string& dir, std::ostream& log) {
  const std::string path = (fs::path(dir) / RunDirectory::kLockFile).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path + ": cannot create the run's lock: " + describe_write_error(path, errno));
  char buffer[32] = {};
  const ssize_t got = ::pread(fd, buffer, sizeof buffer - 1, 0);
  std::string holder(buffer, got > 0 ? static_cast<size_t>(got) : 0);
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    throw std::runtime_error(dir + ": another zoo process" + (holder.empty() ? "" : " (PID " + holder + ")") +
                             " is training in this run directory; wait for it to end, or choose another --run-dir");
  }
  if (!holder.empty()) log << "took over " << path << " from zoo process " << holder << " (no longer running)\n";
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int error = errno;
    ::close(fd);
    throw std::runtime_error(path + ": cannot write the run's lock: " + describe_write_error(path, error));
  }
  // Holds the descriptor (non-null, so the lock tests as held); emptied: released normally.
  return std::shared_ptr<void>(new int(fd), [](void* held) {
    const int descriptor = *static_cast<int*>(held);
    if (::ftruncate(descriptor, 0) != 0) {}  // the lock goes with the descriptor either way
    ::close(descriptor);
    delete static_cast<int*>(held);
  });
}

// Checks `path` for a fresh run and clears an old run there when overwriting (its checkpoints,
// metrics and curves; its token files and tokenizer are reused when they still fit).
void prepare_fresh(const std::string& path, bool overwrite, std::ostream& log) {
  const fs::path run(path);
  std::error_code ec;
  if (!path_exists(run) || (fs::is_directory(run, ec) && fs::is_empty(run, ec))) return;
  if (!fs::is_directory(run, ec)) {
    throw std::runtime_error(path + ": exists and is a file; a run directory is expected here");
  }
  const bool own = holds_own_output(path, OutputKind::kRunDirectory) || path_exists(run / "checkpoints");
  if (!own) check_output(path, OutputKind::kRunDirectory, overwrite);  // throws: not zoo's
  if (!path_exists(run / "checkpoints") && !path_exists(run / "metrics.jsonl")) return;  // set up, never trained
  if (!overwrite) {
    throw std::runtime_error(path + " already holds a run: --resume to continue it, --overwrite to start again "
                                    "there, or another --run-dir");
  }
  remove_own_checkpoints(run / "checkpoints", log);
  for (const char* name : {"metrics.jsonl", "curves.png"}) fs::remove(run / name, ec);
  log << "replaced the run in " << path << " (its checkpoints and metrics)\n";
}

}  // namespace

int64_t checkpoint_step(const std::string& dir) {
  static const std::regex pattern("step-([0-9]+)");
  std::smatch m;
  const std::string name = fs::path(dir).filename().string();
  return std::regex_match(name, m, pattern) ? std::stoll(m[1]) : -1;
}

RunDirectory::RunDirectory(std::string path, Mode mode, bool overwrite, bool writer, std::ostream& log)
    : path_(std::move(path)) {
  if (path_.empty()) throw std::runtime_error("the trainer needs a run directory");
  switch (mode) {
    case Mode::kFresh:
      if (writer) {
        // Locked before an old run is cleared: --overwrite must not clear a run still training.
        std::error_code ec;
        if (fs::is_directory(path_, ec) && holds_own_output(path_, OutputKind::kRunDirectory)) lock_ = lock_run(path_, log);
        prepare_fresh(path_, overwrite, log);
      }
      break;
    case Mode::kResume: last_checkpoint(); break;  // throws when there is nothing to resume
  }
  if (!writer) return;  // rank 0 creates and writes the directory
  created_.emplace(path_);
  if (!lock_) lock_ = lock_run(path_, log);
  write_output_marker(path_, OutputKind::kRunDirectory);
  if (path_exists(checkpoints())) remove_stale_temporaries(checkpoints());
}

std::string RunDirectory::file(const std::string& name) const { return (fs::path(path_) / name).string(); }

std::string RunDirectory::checkpoints() const { return file("checkpoints"); }

std::string RunDirectory::checkpoint(int64_t step) const {
  return (fs::path(checkpoints()) / ("step-" + std::to_string(step))).string();
}

std::string RunDirectory::last_checkpoint() const {
  const fs::path last = fs::path(checkpoints()) / "last";
  std::error_code ec;
  const fs::path target = fs::canonical(last, ec);
  if (ec) throw std::runtime_error(path_ + ": nothing to resume (no checkpoints/last)");
  return target.string();
}

void RunDirectory::commit_checkpoint(int64_t step, bool is_best, int64_t keep_last,
                                     std::optional<int64_t> best_step) {
  const fs::path dir(checkpoints());
  const std::string name = "step-" + std::to_string(step);
  point_link(dir / "last", name);
  if (is_best) point_link(dir / "best", name);
  std::vector<fs::path> saved;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    // zoo's own checkpoints only: a folder of the user's named like one is not zoo's to remove.
    if (entry.is_directory() && !entry.is_symlink() && checkpoint_step(entry.path().string()) >= 0 &&
        holds_own_output(entry.path().string(), OutputKind::kCheckpoint)) {
      saved.push_back(entry.path());
    }
  }
  std::sort(saved.begin(), saved.end(), [](const fs::path& a, const fs::path& b) {
    return checkpoint_step(a.string()) > checkpoint_step(b.string());
  });
  for (size_t i = static_cast<size_t>(std::max<int64_t>(1, keep_last)); i < saved.size(); ++i) {
    if (best_step && checkpoint_step(saved[i].string()) == *best_step) continue;
    // A run killed while pruning must not leave half a checkpoint that no longer loads.
    remove_whole(saved[i].string());
  }
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (path_exists(p / "config.yaml") && path_exists(p / "model.pt")) return path;
  for (const char* link : {"best", "last"}) {
    const fs::path candidate = p / "checkpoints" / link;
    std::error_code ec;
    const fs::path target = fs::canonical(candidate, ec);
    if (!ec) return target.string();
  }
  if (!path_exists(p)) throw std::runtime_error(path + ": no such checkpoint or run directory");
  throw std::runtime_error(path + ": not a checkpoint (no config.yaml and model.pt) nor a run directory "
                                  "(no checkpoints/best or checkpoints/last)");
}

}  // namespace zoo
