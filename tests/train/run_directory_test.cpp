#include "train/run_directory.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/files.h"
#include "kernels/thread_ring.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/evaluation.h"
#include "train/progress.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using namespace train_testing;

// The last K checkpoints and the best stay; `last` and `best` point at the right ones.
TEST(Trainer, KeepsTheLastCheckpointsAndTheBest) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("keep");
  // A high rate, so the best evaluation may well be an early one.
  Trainer trainer(tiny_run(kModels[0], "steps: 12\neval_every: 2\nkeep_last: 2\nlr: 0.05\nwarmup_steps: 1\n"),
                  quiet(dir.string(), log));
  const auto summary = trainer.run();
  double best_loss = INFINITY;
  int64_t best_step = -1;
  for (const auto& r : read_metrics((dir / "metrics.jsonl").string())) {
    if (r["split"] == "val" && r["loss"].get<double>() < best_loss) best_loss = r["loss"], best_step = r["step"];
  }
  std::set<std::string> kept;
  for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
    if (!e.is_symlink()) kept.insert(e.path().filename().string());
  std::set<std::string> expected = {"step-10", "step-12", "step-" + std::to_string(best_step)};
  EXPECT_EQ(kept, expected);
  EXPECT_EQ(fs::read_symlink(dir / "checkpoints" / "last").string(), "step-12");
  EXPECT_EQ(fs::read_symlink(dir / "checkpoints" / "best").string(), "step-" + std::to_string(best_step));
  EXPECT_EQ(resolve_checkpoint(dir.string()), fs::canonical(dir / "checkpoints" / ("step-" + std::to_string(best_step))).string());
  ASSERT_TRUE(summary.best_eval);
  EXPECT_EQ(summary.best_eval->step, best_step);
  // Every saved checkpoint is complete and loads.
  for (const auto& name : kept) EXPECT_NO_THROW(load_checkpoint((dir / "checkpoints" / name).string(), Family::kGpt));
}

TEST(Trainer, RefusesToOverwriteOrResumeWhatIsNotThere) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("refuse").string();
  {
    Trainer t(tiny_run(kModels[0], "steps: 2\n"), quiet(dir, log));
    t.run();
  }
  auto message = error_of([&] { Trainer t(tiny_run(kModels[0]), quiet(dir, log)); });
  EXPECT_NE(message.find("already holds a run: --resume"), std::string::npos) << message;
  auto resume = quiet(testing::scratch_path("refuse-empty").string(), log);
  resume.resume = true;
  message = error_of([&] { Trainer t(tiny_run(kModels[0]), resume); });
  EXPECT_NE(message.find("nothing to resume"), std::string::npos) << message;
  // A checkpoint whose weights were cut short is refused by name.
  const auto model = fs::canonical(fs::path(dir) / "checkpoints" / "last") / "model.pt";
  fs::resize_file(model, fs::file_size(model) / 2);
  auto again = quiet(dir, log);
  again.resume = true;
  message = error_of([&] { Trainer t(load_run_config((fs::path(dir) / "run.yaml").string()), again); });
  EXPECT_NE(message.find("model.pt: cannot read weights"), std::string::npos) << message;
}

// A directory of the user's is never taken for a run.
TEST(Trainer, RefusesADirectoryItDidNotWrite) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("users-dir");
  fs::create_directories(dir);
  write_file_atomically((dir / "thesis.tex").string(), "years of work");
  for (bool overwrite : {false, true}) {
    auto options = quiet(dir.string(), log);
    options.overwrite = overwrite;
    const auto message = error_of([&] { Trainer t(tiny_run(kModels[0]), options); });
    EXPECT_NE(message.find("exists and is not a zoo run directory"), std::string::npos) << message;
  }
  EXPECT_EQ(read_file((dir / "thesis.tex").string()), "years of work");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

// --overwrite replaces the run zoo wrote, never a file a user put in it (issue 31: a user's
// notes under RUN/checkpoints/ went with the old checkpoints).
TEST(Trainer, OverwriteKeepsTheUsersFilesInTheRun) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("overwrite-keeps");
  {
    Trainer t(tiny_run(kModels[0], "steps: 2\n"), quiet(dir.string(), log));
    t.run();
  }
  write_file_atomically((dir / "checkpoints" / "notes.txt").string(), "what I saw at step 2");
  fs::create_directories(dir / "checkpoints" / "step-7");  // a folder of the user's, named like one of zoo's
  auto options = quiet(dir.string(), log);
  options.overwrite = true;
  {
    Trainer t(tiny_run(kModels[0], "steps: 1\n"), options);
    t.run();
  }
  EXPECT_EQ(read_file((dir / "checkpoints" / "notes.txt").string()), "what I saw at step 2");
  EXPECT_TRUE(fs::is_directory(dir / "checkpoints" / "step-7"));
  EXPECT_FALSE(fs::exists(dir / "checkpoints" / "step-2")) << "the old run's checkpoints go";
  EXPECT_TRUE(fs::exists(dir / "checkpoints" / "step-1" / "model.pt"));
  EXPECT_NE(log.str().find("kept what zoo did not write in " + (dir / "checkpoints").string() + ": notes.txt, step-7"),
            std::string::npos)
      << log.str();
}

// A run directory is locked while a run uses it (issue 31: two runs on one directory both exit
// 0, one's run.yaml beside the other's checkpoints): from the Trainer's construction until its
// run() returns, or it is destroyed.
TEST(Trainer, ASecondRunOnTheSameDirectoryIsRefused) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("locked").string();
  {
    Trainer first(tiny_run(kModels[0], "steps: 1\n"), quiet(dir, log));
    for (bool overwrite : {false, true}) {
      auto options = quiet(dir, log);
      options.overwrite = overwrite;
      const auto message = error_of([&] { Trainer second(tiny_run(kModels[0], "steps: 1\n"), options); });
      EXPECT_EQ(message, dir + ": another zoo process (PID " + std::to_string(::getpid()) +
                             ") is training in this run directory; wait for it to end, or choose another --run-dir");
    }
    first.run();  // its end releases the directory
    auto resume = quiet(dir, log);
    resume.resume = true;
    Trainer again(load_run_config((fs::path(dir) / "run.yaml").string()), resume);
    const auto message = error_of([&] { Trainer third(tiny_run(kModels[0], "steps: 1\n"), quiet(dir, log)); });
    EXPECT_NE(message.find("is training in this run directory"), std::string::npos) << message;
  }
  // The PID a process that died left in the lock file is named, and the lock taken over.
  write_file_atomically((fs::path(dir) / RunDirectory::kLockFile).string(), "4194304\n");
  std::ostringstream took;
  auto after_crash = quiet(dir, took);
  after_crash.resume = true;
  Trainer again(load_run_config((fs::path(dir) / "run.yaml").string()), after_crash);
  EXPECT_NE(took.str().find("from zoo process 4194304 (no longer running)"), std::string::npos) << took.str();
}

// A checkpoint write that fails part-way (the file-size limit here; a full disk alike) names the
// cause and leaves the previous checkpoint and the `last` link as they were.
TEST(Trainer, AFailedCheckpointWriteKeepsThePreviousOne) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("full-disk").string();
  Trainer trainer(tiny_run(kModels[0], "steps: 20\n"), quiet(dir, log));
  trainer.step();
  const std::string first = trainer.save(/*is_best=*/true);
  trainer.step();
  {
    testing::ScopedFileSizeLimit limit(8192);
    const auto message = error_of([&] { trainer.save(/*is_best=*/true); });
    EXPECT_EQ(message, (fs::path(dir) / "checkpoints" / "step-2" / "model.pt").string() +
                           ": cannot write: the file-size limit (ulimit -f) was reached");
  }
  const auto checkpoints = fs::path(dir) / "checkpoints";
  EXPECT_EQ(fs::canonical(checkpoints / "last"), fs::canonical(first));
  EXPECT_EQ(fs::canonical(checkpoints / "best"), fs::canonical(first));
  EXPECT_FALSE(fs::exists(checkpoints / "step-2"));
  for (const auto& entry : fs::directory_iterator(checkpoints)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
  const Checkpoint c = load_checkpoint(first);
  EXPECT_EQ(c.state.at("step"), 1);
}

}  // namespace
}  // namespace zoo
