#include "core/outputs.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "core/files.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

fs::path fresh(const std::string& name) {
  auto p = testing::scratch_path("outputs/" + name);
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p;
}

void touch(const fs::path& p, const std::string& bytes = "x") { std::ofstream(p, std::ios::binary) << bytes; }

TEST(Outputs, NewPathsAndEmptyDirectoriesAreWritten) {
  const auto p = fresh("new");
  EXPECT_EQ(check_output(p.string(), OutputKind::kCheckpoint, false), OutputState::kNew);
  fs::create_directories(p);
  EXPECT_EQ(check_output(p.string(), OutputKind::kRunDirectory, false), OutputState::kNew);
  // An empty directory where a file is wanted is still the wrong kind of thing.
  EXPECT_EQ(error_of([&] { check_output(p.string(), OutputKind::kTorchScriptFile, false); }),
            p.string() + ": is a directory; a file name is expected here");
}

TEST(Outputs, AFileWhereADirectoryIsWantedIsRefusedAndKept) {
  const auto p = fresh("file");
  touch(p, "the user's notes");
  for (bool overwrite : {false, true}) {
    EXPECT_EQ(error_of([&] { check_output(p.string(), OutputKind::kCheckpoint, overwrite); }),
              p.string() + ": exists and is a file; a directory is expected here (for a zoo checkpoint)");
  }
  EXPECT_EQ(read_file(p.string()), "the user's notes");
}

TEST(Outputs, ADirectoryWhereAFileIsWantedIsRefused) {
  const auto p = fresh("dir-for-file");
  fs::create_directories(p / "inside");
  EXPECT_EQ(error_of([&] { check_output(p.string(), OutputKind::kTorchScriptFile, true); }),
            p.string() + ": is a directory; a file name is expected here");
}

TEST(Outputs, WhatZooDidNotWriteIsNeverReplaced) {
  const auto p = fresh("user-dir");
  fs::create_directories(p);
  touch(p / "thesis.tex");
  touch(p / "data.csv");
  for (bool overwrite : {false, true}) {
    const auto message = error_of([&] { check_output(p.string(), OutputKind::kCheckpoint, overwrite); });
    EXPECT_EQ(message.rfind(p.string() + ": exists and is not a zoo checkpoint (it holds ", 0), 0u) << message;
    EXPECT_NE(message.find("thesis.tex"), std::string::npos) << message;
    EXPECT_NE(message.find("zoo never replaces what it did not write"), std::string::npos) << message;
  }
  // A Hugging Face directory of the user's looks like an export but carries no marker.
  const auto hf = fresh("user-hf");
  fs::create_directories(hf);
  touch(hf / "config.json", "{}");
  touch(hf / "model.safetensors");
  EXPECT_NE(error_of([&] { check_output(hf.string(), OutputKind::kHuggingFaceDirectory, true); })
                .find("is not a Hugging Face directory written by zoo"),
            std::string::npos);
  const auto notes = fresh("notes.pt");
  touch(notes, "not an archive");
  EXPECT_NE(error_of([&] { check_output(notes.string(), OutputKind::kTorchScriptFile, true); }).find("a file zoo did not write"),
            std::string::npos);
}

TEST(Outputs, ZoosOwnOutputIsReplacedOnlyWithOverwrite) {
  const auto checkpoint = fresh("checkpoint");
  fs::create_directories(checkpoint);
  for (const char* f : {"config.yaml", "model.pt", "state.json"}) touch(checkpoint / f);  // written before markers
  EXPECT_EQ(error_of([&] { check_output(checkpoint.string(), OutputKind::kCheckpoint, false); }),
            checkpoint.string() + ": holds a zoo checkpoint already; --overwrite replaces it");
  EXPECT_EQ(check_output(checkpoint.string(), OutputKind::kCheckpoint, true), OutputState::kReplace);
  // The marker says what a directory is: a checkpoint is not a run directory.
  const auto exported = fresh("exported");
  fs::create_directories(exported);
  write_output_marker(exported.string(), OutputKind::kHuggingFaceDirectory);
  EXPECT_TRUE(holds_own_output(exported.string(), OutputKind::kHuggingFaceDirectory));
  EXPECT_FALSE(holds_own_output(exported.string(), OutputKind::kRunDirectory));
  EXPECT_EQ(check_output(exported.string(), OutputKind::kHuggingFaceDirectory, true), OutputState::kReplace);
}

TEST(Outputs, FilesAreRecognisedByTheirContents) {
  const auto png = fresh("curves.png");
  touch(png, std::string("\x89PNG\r\n\x1a\n", 8) + "rest");
  EXPECT_TRUE(holds_own_output(png.string(), OutputKind::kImageFile));
  const auto archive = fresh("model.pt");
  touch(archive, "PK\x03\x04 ... central directory: model/extra/zoo.json ...");
  EXPECT_TRUE(holds_own_output(archive.string(), OutputKind::kTorchScriptFile));
  const auto zip = fresh("other.pt");
  touch(zip, "PK\x03\x04 a zip without zoo's metadata");
  EXPECT_FALSE(holds_own_output(zip.string(), OutputKind::kTorchScriptFile));
  const auto tokenizer = fresh("tok.model");
  touch(tokenizer, "\n\x09<pad>...\n\x09[CLS]...\n\x0a[MASK]...<extra_id_0>...");
  EXPECT_TRUE(holds_own_output(tokenizer.string(), OutputKind::kTokenizerModel));
}

TEST(Outputs, ACreatedDirectoryGoesWhenTheCommandFails) {
  const auto top = fresh("created");
  const auto inner = top / "runs" / "a";
  EXPECT_THROW(
      {
        CreatedDirectory dir(inner.string());
        EXPECT_TRUE(dir.created());
        touch(inner / "tokenizer.model");
        throw std::runtime_error("bad input");
      },
      std::runtime_error);
  EXPECT_FALSE(fs::exists(top)) << "the highest folder the command created is removed";

  {
    CreatedDirectory dir(inner.string());  // no failure: it stays
  }
  EXPECT_TRUE(fs::is_directory(inner));
  const auto kept = top / "kept";
  EXPECT_THROW(
      {
        CreatedDirectory dir(kept.string());
        dir.keep();
        throw std::runtime_error("after setup");
      },
      std::runtime_error);
  EXPECT_TRUE(fs::is_directory(kept));
  // A directory that was there before is never removed.
  EXPECT_THROW(
      {
        CreatedDirectory dir(inner.string());
        EXPECT_FALSE(dir.created());
        throw std::runtime_error("bad input");
      },
      std::runtime_error);
  EXPECT_TRUE(fs::is_directory(inner));
}

}  // namespace
}  // namespace zoo
