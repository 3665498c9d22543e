#include "core/files.h"

#include <filesystem>

#include <gtest/gtest.h>

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
  EXPECT_THROW(write_file_atomically("/nonexistent/zoo/out.txt", "x"), std::runtime_error);
  EXPECT_THROW(read_file("/tmp"), std::runtime_error);
}

}  // namespace
}  // namespace zoo
