#include "core/files.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>

#include "base_test_util.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;

TEST(Files, AtomicWriteReplacesWholeAndLeavesNoTemporary) {
  auto dir = fs::temp_directory_path() / ("zoo_files_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto path = (dir / "out.bin").string();
  write_file_atomically(path, std::string("first\0version", 13));
  EXPECT_EQ(read_file(path), std::string("first\0version", 13));
  write_file_atomically(path, "second");
  EXPECT_EQ(read_file(path), "second");
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) entries += e.is_regular_file();
  EXPECT_EQ(entries, 1);  // no temporary left behind
  fs::remove_all(dir);
}

TEST(Files, ErrorsNameThePath) {
  try {
    read_file("/nonexistent/zoo/file.txt");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("/nonexistent/zoo/file.txt: cannot open", 0), 0u) << e.what();
  }
  EXPECT_EQ(testing::error_of([] { write_file_atomically("/nonexistent/zoo/out.txt", "x"); }),
            "/nonexistent/zoo/out.txt: cannot write: the directory /nonexistent/zoo does not exist");
  EXPECT_FALSE(fs::exists("/nonexistent/zoo"));
  EXPECT_THROW(read_file("/tmp"), std::runtime_error);
}

// A write that fails part-way (here the file-size limit, as a full disk would) names the target
// and the cause, keeps the previous file whole and leaves no temporary behind.
TEST(Files, AFailedWriteKeepsTheOldFileAndNamesTheCause) {
  const auto dir = testing::scratch_path("files-limit");
  fs::create_directories(dir);
  const auto path = (dir / "model.pt").string();
  write_file_atomically(path, "previous");
  {
    testing::ScopedFileSizeLimit limit(4096);
    EXPECT_EQ(testing::error_of([&] { write_file_atomically(path, std::string(100000, 'x')); }),
              path + ": cannot write: the file-size limit (ulimit -f) was reached");
  }
  EXPECT_EQ(read_file(path), "previous");
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) entries += e.is_regular_file();
  EXPECT_EQ(entries, 1);
}

// The reasons, worded for the user, for what the system calls say.
TEST(Files, WriteErrorsAreSaidInWords) {
  EXPECT_EQ(describe_write_error("out/x", ENOSPC), "the disk is full");
  EXPECT_EQ(describe_write_error("out/x", EFBIG), "the file-size limit (ulimit -f) was reached");
  EXPECT_EQ(describe_write_error("/tmp/x", EACCES), "permission denied: the directory /tmp is not writable");
  EXPECT_EQ(describe_write_error("/tmp/x", EROFS), "the file system of /tmp is read-only");
}

TEST(Files, DirectoriesNameWhatIsInTheWay) {
  const auto file = testing::scratch_path("in-the-way");
  write_file_atomically(file.string(), "a file");
  EXPECT_EQ(testing::error_of([&] { create_directories((file / "runs" / "x").string()); }),
            (file / "runs" / "x").string() + ": cannot create the directory: " + file.string() +
                " is a file, not a directory");
  EXPECT_EQ(testing::error_of([&] { create_directories(file.string()); }),
            file.string() + ": exists and is a file, not a directory");
  create_directories((testing::scratch_path("new-dirs") / "a" / "b").string());
  EXPECT_TRUE(fs::is_directory(testing::scratch_path("new-dirs") / "a" / "b"));
}

TEST(Files, AFinishedDirectoryReplacesTheOldOneWhole) {
  const auto target = testing::scratch_path("replace-target");
  fs::create_directories(target);
  write_file_atomically((target / "old.txt").string(), "old");
  const auto finished = testing::scratch_path("replace-finished");
  fs::create_directories(finished);
  write_file_atomically((finished / "new.txt").string(), "new");
  replace_directory(finished.string(), target.string());
  EXPECT_FALSE(fs::exists(finished));
  EXPECT_FALSE(fs::exists(target / "old.txt"));
  EXPECT_EQ(read_file((target / "new.txt").string()), "new");
}

// A directory is renamed away before it is removed: a process killed while pruning a checkpoint
// left half of it under its own name, no longer loadable and no longer recognised as zoo's.
TEST(Files, RemoveWholeLeavesNothingUnderTheName) {
  const auto dir = testing::scratch_path("whole");
  fs::create_directories(dir / "step-3" / "optimizer");
  write_file_atomically((dir / "step-3" / "model.pt").string(), "weights");
  remove_whole((dir / "step-3").string());
  EXPECT_TRUE(fs::is_empty(dir));
  remove_whole((dir / "missing").string());  // nothing there: nothing to do
  EXPECT_TRUE(fs::is_empty(dir));
}

// The PID of a child process that has already exited: a writer that is gone.
pid_t ended_process_id() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

// What a killed writer left (NAME.tmp.PID.N of a process that is gone) is cleared; what a
// running process writes is not.
TEST(Files, StaleTemporariesOfDeadWritersAreRemoved) {
  const auto dir = testing::scratch_path("stale");
  fs::create_directories(dir);
  const pid_t child = ended_process_id();
  fs::create_directories(dir / ("step-4.tmp." + std::to_string(child) + ".0"));
  write_file_atomically((dir / ("step-4.tmp." + std::to_string(::getpid()) + ".7")).string(), "mine");
  write_file_atomically((dir / "step-2").string(), "a checkpoint");
  EXPECT_EQ(remove_stale_temporaries(dir.string()), 1);
  EXPECT_FALSE(fs::exists(dir / ("step-4.tmp." + std::to_string(child) + ".0")));
  EXPECT_TRUE(fs::exists(dir / ("step-4.tmp." + std::to_string(::getpid()) + ".7")));
  EXPECT_TRUE(fs::exists(dir / "step-2"));
}

// Issue 31: an import-hf, export-hf or export killed with SIGKILL left OUT.tmp.PID.0 (249 MB in
// one case) that no later run reused or removed. The next write of OUT removes its own stale
// temporaries (those of a dead zoo process), says so, and leaves everything else.
TEST(Files, WritingAPathRemovesItsStaleTemporaries) {
  const auto dir = testing::scratch_path("stale-of");
  fs::create_directories(dir);
  const pid_t child = ended_process_id();
  const std::string dead = std::to_string(child), alive = std::to_string(::getpid());
  fs::create_directories(dir / ("model.tmp." + dead + ".0"));
  write_file_atomically((dir / ("model.tmp." + dead + ".0") / "model.safetensors").string(), "partial");
  write_file_atomically((dir / ("model.tmp." + dead + ".3.index")).string(), "partial");
  write_file_atomically((dir / ("model.tmp." + alive + ".9")).string(), "being written");
  write_file_atomically((dir / ("other.tmp." + dead + ".0")).string(), "another output's");
  write_file_atomically((dir / "model.tmp.notes").string(), "the user's");
  std::ostringstream log;
  EXPECT_EQ(remove_stale_temporaries_of((dir / "model").string(), &log), 2);
  EXPECT_FALSE(fs::exists(dir / ("model.tmp." + dead + ".0")));
  EXPECT_FALSE(fs::exists(dir / ("model.tmp." + dead + ".3.index")));
  EXPECT_TRUE(fs::exists(dir / ("model.tmp." + alive + ".9")));
  EXPECT_TRUE(fs::exists(dir / ("other.tmp." + dead + ".0")));
  EXPECT_TRUE(fs::exists(dir / "model.tmp.notes"));
  EXPECT_NE(log.str().find("left by zoo process " + dead + " (no longer running) while it wrote"), std::string::npos)
      << log.str();
  // temporary_path_for does it before naming a new temporary.
  fs::create_directories(dir / ("model.tmp." + dead + ".1"));
  const std::string fresh = temporary_path_for((dir / "model").string());
  EXPECT_FALSE(fs::exists(dir / ("model.tmp." + dead + ".1")));
  EXPECT_EQ(fresh.rfind((dir / ("model.tmp." + alive + ".")).string(), 0), 0u);
}

}  // namespace
}  // namespace zoo
