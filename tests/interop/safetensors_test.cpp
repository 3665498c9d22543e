#include "interop/safetensors.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/files.h"
#include "test_util.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

// A file assembled byte by byte from the format's description.
std::string file_bytes(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(json.size()) >> (8 * i) & 0xff);
  return out + json + data;
}

std::string write(const std::string& name, const std::string& bytes) {
  const auto path = testing::scratch_path(name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(Safetensors, ReadsAFileWrittenByHandFromTheSpec) {
  // Two tensors: a (2,) F32 [1.5, -2] and a () I64 7, plus metadata.
  float a[2] = {1.5f, -2.0f};
  int64_t b = 7;
  std::string data(reinterpret_cast<const char*>(a), 8);
  data += std::string(reinterpret_cast<const char*>(&b), 8);
  const auto path = write("hand.safetensors",
                          file_bytes(R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
                                     R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                     data));
  const auto file = load_safetensors(path);
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_TRUE(torch::equal(file.tensors.at("a"), torch::tensor({1.5f, -2.0f})));
  EXPECT_EQ(file.tensors.at("b").dim(), 0);
  EXPECT_EQ(file.tensors.at("b").item<int64_t>(), 7);
  EXPECT_EQ(file.metadata.at("format"), "pt");
}

TEST(Safetensors, RoundTripsEveryDtypeAndLaysOutBytesAsTheSpecSays) {
  torch::manual_seed(0);
  std::map<std::string, torch::Tensor> tensors = {
      {"f64", torch::randn({3, 2}, torch::kFloat64)},
      {"f32", torch::randn({4}).t()},
      {"f16", torch::randn({2, 3}).to(torch::kFloat16)},
      {"bf16", torch::randn({5}).to(torch::kBFloat16)},
      {"i64", torch::randint(-100, 100, {3}, torch::kInt64)},
      {"i32", torch::randint(-100, 100, {2, 2}, torch::kInt32)},
      {"i16", torch::randint(-100, 100, {3}, torch::kInt16)},
      {"i8", torch::randint(-100, 100, {3}, torch::kInt8)},
      {"u8", torch::randint(0, 255, {3}, torch::kUInt8)},
      {"bool", torch::rand({4}) > 0.5},
      {"scalar", torch::tensor(3.25)},
      {"empty", torch::zeros({0, 4})},
      {"strided", torch::arange(12, torch::kFloat).view({3, 4}).t()}};
  const auto path = testing::scratch_path("round.safetensors").string();
  save_safetensors(path, tensors, {{"format", "pt"}});
  const auto back = load_safetensors(path);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(back.tensors.at(name).scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(back.tensors.at(name), t)) << name;
  }
  EXPECT_EQ(back.metadata.at("format"), "pt");
  // The header by hand: u64 length, JSON, data area 8-byte aligned and exactly covered.
  const std::string bytes = read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["f32"]["dtype"], "F32");
  EXPECT_EQ(header["f32"]["shape"], nlohmann::json::array({4}));
  uint64_t covered = 0;
  for (const auto& [name, value] : header.items())
    if (name != "__metadata__") covered += value["data_offsets"][1].get<uint64_t>() - value["data_offsets"][0].get<uint64_t>();
  EXPECT_EQ(8 + n + covered, bytes.size());
  // Column-major input is written row-major: the 4x3 transpose reads back as its values.
  const auto& s = header["strided"]["data_offsets"];
  float first[3];
  std::memcpy(first, bytes.data() + 8 + n + s[0].get<uint64_t>(), sizeof first);
  EXPECT_EQ(first[0], 0.0f);
  EXPECT_EQ(first[1], 4.0f);
  EXPECT_EQ(first[2], 8.0f);
}

// Each broken file is refused with a message naming the file and the problem.
TEST(Safetensors, RefusesTruncatedLyingAndMalformedFiles) {
  const std::string ok_json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\1');
  struct Case {
    std::string name, bytes, expected;
  };
  std::string huge_length(8, '\0');
  huge_length[5] = 1;  // 2^40
  std::string past_end = file_bytes(ok_json, eight).substr(0, 8) + "{}";
  const std::vector<Case> cases = {
      {"empty", "", "shorter than the length prefix"},
      {"oversized", huge_length + "{}", "exceeds the 100 MiB limit"},
      {"past_end", past_end, "runs past the end of the file"},
      {"truncated_data", file_bytes(ok_json, eight).substr(0, 8 + ok_json.size() + 5), "run past the data area (5 bytes)"},
      {"not_json", file_bytes("{nonsense", eight), "malformed JSON header"},
      {"not_object", file_bytes("[1, 2]", ""), "the header is not a JSON object"},
      {"wrong_dtype", file_bytes(R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", eight), "unknown dtype 'F31'"},
      {"size_mismatch", file_bytes(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", eight),
       "8 bytes of data, but dtype F64 and its shape need 16"},
      {"negative_shape", file_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       "negative or non-integer size"},
      {"overlap", file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       "overlaps the tensor before it"},
      {"hole", file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight), "a hole in the data area"},
      {"uncovered", file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
       "the data area has 8 bytes but the tensors cover 4"},
      {"reversed", file_bytes(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight), "end before they begin"},
      {"missing_key", file_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", eight), "missing 'data_offsets'"},
      {"overflow", file_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}})", eight),
       "shape is too large"},
      {"bad_metadata", file_bytes(R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight),
       "__metadata__: 'k' is not a string"},
  };
  for (const auto& c : cases) {
    const auto path = write("bad-" + c.name + ".safetensors", c.bytes);
    const auto message = error_of([&] { load_safetensors(path); });
    EXPECT_NE(message.find(path + ": "), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": " << message;
  }
  EXPECT_NE(error_of([&] { load_safetensors(testing::scratch_path("none.safetensors").string()); }).find("cannot open"),
            std::string::npos);
}

TEST(Safetensors, RefusesUnrepresentableDtypesWithoutLeavingAFile) {
  const auto path = testing::scratch_path("complex.safetensors").string();
  const auto message = error_of([&] { save_safetensors(path, {{"z", torch::zeros({2}, torch::kComplexFloat)}}); });
  EXPECT_NE(message.find("tensor 'z' has dtype ComplexFloat"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(path));
}

// Loaded tensors are views of a private mapping: changed in place, the file stays as it was;
// their pages given back, they read the file again; other tensors are left alone.
TEST(Safetensors, MappedTensorsCopyOnWriteAndGiveBackTheirPages) {
  const auto path = testing::scratch_path("mapped.safetensors").string();
  const auto big = torch::arange(1 << 20, torch::kFloat).reshape({1024, 1024});
  save_safetensors(path, {{"big", big}, {"small", torch::ones({3})}});
  {
    auto loaded = load_safetensors(path);
    auto& t = loaded.tensors.at("big");
    EXPECT_TRUE(torch::equal(t, big));
    t[600][0] = -1.0f;  // a private copy of that page
    EXPECT_EQ(t[600][0].item<float>(), -1.0f);
    release_file_pages(t.narrow(0, 0, 512));  // a contiguous view: its own whole pages, not row 600's
    EXPECT_EQ(t[600][0].item<float>(), -1.0f);
    EXPECT_TRUE(torch::equal(t.narrow(0, 0, 512), big.narrow(0, 0, 512)));
    release_file_pages(t);  // the change is given back with its page: the file's value again
    EXPECT_TRUE(torch::equal(t, big));
    auto own = big.clone();
    release_file_pages(own);  // not a mapping: untouched
    EXPECT_TRUE(torch::equal(own, big));
  }
  EXPECT_TRUE(torch::equal(load_safetensors(path).tensors.at("big"), big));
}

}  // namespace
}  // namespace zoo
