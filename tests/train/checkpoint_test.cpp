#include "train/checkpoint.h"

#include <filesystem>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/files.h"
#include "test_util.h"
#include "train/optimizer.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

Model tiny_gpt(int64_t d_model = 32) {
  auto config = parse_config("family: gpt\nvocab_size: 50\nd_model: " + std::to_string(d_model) +
                             "\nn_layers: 2\nn_heads: 4\nd_ff: 64\nmax_positions: 32\ndropout: 0.0\nattention_dropout: 0.0\n");
  return build_model(config);
}

// One AdamW step on a fixed batch, so the optimizer has state worth saving.
void step(Model& m, torch::optim::Optimizer& opt, const torch::Tensor& ids) {
  opt.zero_grad();
  torch::nn::functional::cross_entropy(m.gpt->forward(ids).view({-1, 50}), ids.view(-1)).backward();
  opt.step();
}

TEST(Checkpoint, RoundTripRestoresWeightsOptimizerStateAndMetadata) {
  torch::manual_seed(0);
  auto model = tiny_gpt();
  auto opt = make_adamw(*model.module(), OptimizerOptions{});
  auto ids = torch::randint(50, {2, 8}, torch::kLong);
  step(model, *opt, ids);
  const auto dir = testing::scratch_path("ckpt/step-1").string();
  save_checkpoint(dir, model, opt.get(), nullptr, {{"step", 1}, {"sampler", {{"epoch", 0}, {"index", 7}}}});
  for (const char* f : {"model.pt", "optimizer.pt", "config.yaml", "state.json"}) EXPECT_TRUE(fs::exists(fs::path(dir) / f)) << f;
  const auto parent = fs::path(dir).parent_path();
  EXPECT_EQ(std::distance(fs::directory_iterator(parent), fs::directory_iterator()), 1);  // no temporary left

  auto loaded = load_checkpoint(dir, Family::kGpt);
  EXPECT_EQ(loaded.state["step"], 1);
  EXPECT_EQ(loaded.state["sampler"]["index"], 7);
  model.module()->eval();
  loaded.model.module()->eval();
  EXPECT_LE(testing::max_abs_diff(loaded.model.gpt->forward(ids), model.gpt->forward(ids)), 0.0);
  // The restored optimizer continues exactly as the original.
  auto opt2 = make_adamw(*loaded.model.module(), OptimizerOptions{});
  load_optimizer_state(dir, *opt2);
  model.module()->train();
  loaded.model.module()->train();
  step(model, *opt, ids);
  step(loaded.model, *opt2, ids);
  for (const auto& p : model.module()->named_parameters()) {
    EXPECT_LE(testing::max_abs_diff(p.value(), loaded.model.module()->named_parameters()[p.key()]), 0.0) << p.key();
  }
  // Saving again under the same name replaces the checkpoint whole.
  save_checkpoint(dir, model, opt.get(), nullptr, {{"step", 2}});
  EXPECT_EQ(load_checkpoint(dir).state["step"], 2);
}

TEST(Checkpoint, Bf16WeightsLoadAsFloat32AndAutoKeepsTheirType) {
  torch::manual_seed(0);
  auto model = tiny_gpt();
  const auto fp32_dir = testing::scratch_path("dtype/fp32").string();
  save_checkpoint(fp32_dir, model, nullptr, nullptr, {{"step", 0}});
  // What an import of a bf16 Hugging Face model writes: every tensor in bf16.
  model.module()->to(torch::kBFloat16);
  const auto bf16_dir = testing::scratch_path("dtype/bf16").string();
  save_checkpoint(bf16_dir, model, nullptr, nullptr, {{"step", 0}});
  EXPECT_LT(fs::file_size(fs::path(bf16_dir) / "model.pt"), fs::file_size(fs::path(fp32_dir) / "model.pt") * 3 / 4);

  auto fp32 = load_checkpoint(fp32_dir), bf16 = load_checkpoint(bf16_dir);
  EXPECT_EQ(fp32.stored_dtype, torch::kFloat);
  EXPECT_EQ(bf16.stored_dtype, torch::kBFloat16);
  const auto saved = model.module()->named_parameters();
  for (const auto& p : bf16.model.module()->named_parameters()) {
    // float32 master weights holding the stored bf16 values exactly.
    EXPECT_EQ(p.value().scalar_type(), torch::kFloat) << p.key();
    EXPECT_TRUE(p.value().equal(saved[p.key()].to(torch::kFloat))) << p.key();
  }
  EXPECT_EQ(resolve_weights_dtype(WeightsDtype::kAuto, bf16.stored_dtype), torch::kBFloat16);
  EXPECT_EQ(resolve_weights_dtype(WeightsDtype::kAuto, fp32.stored_dtype), torch::kFloat);
  EXPECT_EQ(resolve_weights_dtype(WeightsDtype::kFloat32, bf16.stored_dtype), torch::kFloat);
  EXPECT_EQ(resolve_weights_dtype(WeightsDtype::kBFloat16, fp32.stored_dtype), torch::kBFloat16);
  EXPECT_EQ(from_string<WeightsDtype>("bf16"), WeightsDtype::kBFloat16);
  EXPECT_EQ(error_of([] { from_string<WeightsDtype>("fp16"); }),
            "unknown weights dtype 'fp16' (expected one of: auto, fp32, bf16)");
}

TEST(Checkpoint, BadCheckpointsNameTheFileAndTheMismatch) {
  auto model = tiny_gpt();
  const auto dir = testing::scratch_path("bad/step-1").string();
  save_checkpoint(dir, model, nullptr, nullptr, {{"step", 1}});
  EXPECT_EQ(error_of([&] { load_checkpoint(dir, Family::kBert); }),
            dir + ": a gpt checkpoint, but this needs a bert model");
  EXPECT_NE(error_of([&] { load_optimizer_state(dir, *make_adamw(*model.module(), {})); }).find("optimizer.pt: missing"),
            std::string::npos);
  // Weights of a differently sized model.
  const auto weights = (fs::path(dir) / "model.pt").string();
  auto wide = tiny_gpt(64);
  save_weights(weights, *wide.module());
  auto message = error_of([&] { load_checkpoint(dir); });
  EXPECT_NE(message.find(weights + ": tensor '"), std::string::npos) << message;
  EXPECT_NE(message.find("has shape [50, 64] but the model's is [50, 32]"), std::string::npos) << message;
  // Weights with a tensor missing and one extra.
  torch::nn::Sequential other(torch::nn::Linear(3, 3));
  save_weights(weights, *other);
  message = error_of([&] { load_weights(weights, *model.module()); });
  EXPECT_NE(message.find("missing tensors: "), std::string::npos) << message;
  EXPECT_NE(message.find("unexpected tensors: 0.weight, 0.bias"), std::string::npos) << message;
  // A truncated file.
  save_weights(weights, *model.module());
  const auto bytes = read_file(weights);
  write_file_atomically(weights, bytes.substr(0, bytes.size() / 2));
  EXPECT_NE(error_of([&] { load_checkpoint(dir); }).find(weights + ": cannot read weights (truncated or corrupt)"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { load_checkpoint(testing::scratch_path("nowhere").string()); }),
            testing::scratch_path("nowhere").string() + ": no such checkpoint directory");
}

// Weights holding NaN or infinity are refused as they are read, naming the file and the first
// such tensor, rather than reaching generation as "probability tensor contains either inf, nan".
TEST(Checkpoint, NonFiniteWeightsAreRefusedNamingTheTensor) {
  auto model = tiny_gpt();
  {
    torch::NoGradGuard no_grad;
    auto weight = model.gpt->token_embedding->weight;
    weight[3][1] = std::numeric_limits<float>::quiet_NaN();
    weight[7][0] = std::numeric_limits<float>::infinity();
  }
  const auto dir = testing::scratch_path("nan/step-1").string();
  save_checkpoint(dir, model, nullptr, nullptr, {{"step", 1}});
  EXPECT_EQ(error_of([&] { load_checkpoint(dir); }),
            (fs::path(dir) / "model.pt").string() +
                ": tensor 'token_embedding.weight' holds 2 non-finite values (NaN or infinity) of 1600: the weights "
                "are corrupt or diverged");
}

// A quantized model saved and loaded: the same integers, scales and zeros, the same logits, its
// float tensors' type kept; bad records and packed tensors are refused by file and name.
TEST(Checkpoint, QuantizedCheckpointsRoundTripAndBadOnesAreNamed) {
  const auto ids = torch::randint(50, {2, 8}, torch::kLong);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const WeightQuantization q : {WeightQuantization{WeightFormat::kInt8, 0, true},
                                       WeightQuantization{WeightFormat::kInt4, 32, false}}) {
      SCOPED_TRACE(q.describe() + " " + c10::toString(dtype));
      torch::manual_seed(0);
      auto model = tiny_gpt();
      model.module()->to(dtype);
      quantize_model(model, q);
      model.module()->eval();
      const auto dir = testing::scratch_path("quantized/" + q.describe() + c10::toString(dtype)).string();
      save_checkpoint(dir, model, nullptr, nullptr, {{"step", 3}});
      auto loaded = load_checkpoint(dir);
      ASSERT_TRUE(loaded.model.quantization.has_value());
      EXPECT_EQ(loaded.model.quantization->describe(), q.describe());
      EXPECT_EQ(loaded.stored_dtype, dtype);
      place_weights(*loaded.model.module(), torch::kCPU, dtype);
      loaded.model.module()->eval();
      const auto saved = model.module()->named_buffers();
      int64_t scales = 0;
      for (const auto& b : loaded.model.module()->named_buffers()) {
        EXPECT_TRUE(b.value().equal(saved[b.key()])) << b.key();  // bit-equal, scales still float32
        scales += b.key().ends_with(".weight_scale");
      }
      EXPECT_EQ(scales, 2 * 4 + (q.token_embeddings ? 1 : 0));
      torch::NoGradGuard no_grad;
      EXPECT_TRUE(loaded.model.gpt->forward(ids).equal(model.gpt->forward(ids)));
      // Its float twin computes what the integers stand for.
      auto plain = dequantized_model(loaded.model);
      plain.module()->to(dtype);
      plain.module()->eval();
      EXPECT_LE((plain.gpt->forward(ids) - model.gpt->forward(ids)).abs().max().item<double>(),
                dtype == torch::kFloat ? 1e-5 : 0.1);
      const auto line = describe_stored_weights(dir, count_parameters(*plain.module()));
      EXPECT_NE(line.find("bytes per parameter (" + q.describe() + "; the rest in "), std::string::npos) << line;
    }
  }
  {
    // A mixture of experts: its stacks quantized as their rows, read back into the same layout.
    SCOPED_TRACE("experts");
    torch::manual_seed(0);
    auto experts = build_model(testing::tiny_config("gpt", {"d_model=32", "d_ff=64", "experts=4", "experts_per_token=2", "activation=swiglu", "bias=false"}));
    experts.module()->eval();
    const WeightQuantization q{WeightFormat::kInt4, 32, true};
    EXPECT_EQ(quantize_model(experts, q).stacks, 2 * experts.config.n_layers);
    const auto dir = testing::scratch_path("quantized/experts").string();
    save_checkpoint(dir, experts, nullptr, nullptr, {{"step", 1}});
    auto loaded = load_checkpoint(dir);
    loaded.model.module()->eval();
    const auto saved = experts.module()->named_buffers();
    int64_t stacks = 0;
    for (const auto& b : loaded.model.module()->named_buffers()) {
      EXPECT_TRUE(b.value().equal(saved[b.key()])) << b.key();
      stacks += b.key().ends_with(".gate_up_quantized") || b.key().ends_with(".down_quantized");
    }
    EXPECT_EQ(stacks, 2 * experts.config.n_layers);
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(loaded.model.gpt->forward(ids).equal(experts.gpt->forward(ids)));
    auto plain = dequantized_model(loaded.model);
    plain.module()->eval();
    EXPECT_LE((plain.gpt->forward(ids) - experts.gpt->forward(ids)).abs().max().item<double>(), 1e-4);
  }
  auto model = tiny_gpt();
  const auto plain_dir = testing::scratch_path("quantized/plain").string();
  save_checkpoint(plain_dir, model, nullptr, nullptr, {{"step", 0}});
  const auto fp32_line = describe_stored_weights(plain_dir, count_parameters(*model.module()));
  EXPECT_NE(fp32_line.find(", 4.0"), std::string::npos) << fp32_line;  // 4 bytes a parameter and the file's few
  EXPECT_NE(fp32_line.find(" bytes per parameter (float32)"), std::string::npos) << fp32_line;
  quantize_model(model, {WeightFormat::kInt4, 32, true});
  const auto dir = testing::scratch_path("quantized/bad").string();
  save_checkpoint(dir, model, nullptr, nullptr, {{"step", 0}});
  const auto int4_line = describe_stored_weights(dir, count_parameters(*tiny_gpt().module()));
  EXPECT_LT(std::stod(int4_line.substr(int4_line.find(", ") + 2)), 1.3) << int4_line;
  // Training all its weights needs float ones; a LoRA run's frozen base takes its integers.
  auto fresh = tiny_gpt();
  std::ostringstream log;
  EXPECT_EQ(error_of([&] { initialize_from_checkpoint(fresh, dir, log); }),
            dir + ": a quantized checkpoint (int4 (groups of 32)); training all its weights needs float weights: "
                  "train LoRA adapters on it (lora.rank), or use the checkpoint it was quantized from");
  initialize_from_checkpoint(fresh, dir, log, /*frozen_base=*/true);
  ASSERT_TRUE(fresh.quantization.has_value());
  const auto buffers = model.module()->named_buffers();
  for (const auto& b : fresh.module()->named_buffers()) EXPECT_TRUE(b.value().equal(buffers[b.key()])) << b.key();
  // A layer the base lacks (here an untied output head) would be frozen zeros: refused.
  auto untied = build_model(parse_config("family: gpt\nvocab_size: 50\nd_model: 32\nn_layers: 2\nn_heads: 4\n"
                                         "d_ff: 64\nmax_positions: 32\ntie_embeddings: false\n"));
  EXPECT_EQ(error_of([&] { initialize_from_checkpoint(untied, dir, log, /*frozen_base=*/true); }),
            dir + ": the run's lm_head is not in this quantized checkpoint (or has another shape); LoRA on a "
                  "quantized base adapts the base's own layers: start a new head from a float checkpoint");
  // quantization.json: each bad record named by file and key.
  const auto record = (fs::path(dir) / "quantization.json").string();
  const std::string good = read_file(record);
  const std::vector<std::pair<std::string, std::string>> bad{
      {R"({"format": "int4", "group_size": 32, "token_embeddings": true, "bits": 4})",
       record + ": (top level): unknown key 'bits' (expected format, group_size, token_embeddings)"},
      {R"({"format": "int3", "token_embeddings": true})",
       record + ": format: unknown weight format 'int3' (expected one of: int8, int4)"},
      {R"({"format": "int4", "group_size": 48, "token_embeddings": true})",
       record + ": group_size: int4 groups 32, 64 or 128 inputs, not 48"},
      {R"({"format": "int8", "group_size": 32, "token_embeddings": true})",
       record + ": group_size: int8 has a scale per output, no group size"},
  };
  for (const auto& [text, message] : bad) {
    write_file_atomically(record, text);
    EXPECT_EQ(error_of([&] { load_checkpoint(dir); }), message);
  }
  // A record that does not match the weights: int8's tensors are missing, int4's unexpected.
  write_file_atomically(record, R"({"format": "int8", "token_embeddings": true})");
  EXPECT_NE(error_of([&] { load_checkpoint(dir); }).find("unexpected tensors: "), std::string::npos);
  write_file_atomically(record, good);
  // A packed tensor with a negative scale, and one with the wrong type.
  const auto weights = (fs::path(dir) / "model.pt").string();
  {
    torch::NoGradGuard no_grad;
    auto buffers = model.module()->named_buffers();
    buffers["blocks.1.ff.down.weight_scale"][2][1] = -0.5;
    save_weights(weights, *model.module());
  }
  EXPECT_EQ(error_of([&] { load_checkpoint(dir); }),
            weights + ": blocks.1.ff.down.weight: a scale is zero or negative");
  {
    torch::NoGradGuard no_grad;
    auto buffers = model.module()->named_buffers();
    buffers["blocks.1.ff.down.weight_scale"][2][1] = 0.5;
    save_weights(weights, *model.module());
  }
  EXPECT_NO_THROW(load_checkpoint(dir));
}

}  // namespace
}  // namespace zoo
