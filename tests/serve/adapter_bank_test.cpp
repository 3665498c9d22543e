#include "serve/adapter_bank.h"

#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/files.h"
#include "interop/peft.h"
#include "serve/model_runner.h"
#include "serve/prefix_cache.h"
#include "test_util.h"
#include "train/checkpoint.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

// LLaMA's layout: fused q/k/v with GQA, SwiGLU's gate, separate Hugging Face projections.
constexpr const char* kConfig =
    "{family: gpt, vocab_size: 61, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, d_ff: 48, "
    "max_positions: 64, activation: swiglu, norm: rmsnorm, position: rope, bias: false, tie_embeddings: false, "
    "init_std: 0.2}";

std::string save_base(const std::string& name, int seed, const std::string& config = kConfig) {
  torch::manual_seed(seed);
  auto model = build_model(parse_config(config));
  const auto dir = testing::scratch_path(name).string();
  save_checkpoint(dir, model, nullptr, nullptr, {{"step", 0}});
  return dir;
}

// A LoRA checkpoint of `base_dir` with random (non-zero) adapters.
std::string save_adapter(const std::string& name, const std::string& base_dir, const LoraConfig& config, int seed) {
  Model model = load_checkpoint(base_dir).model;
  std::ostringstream log;
  train_lora(model, new_lora_state(base_dir, config, {}), log);
  torch::manual_seed(seed);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model.module()->named_parameters())
      if (is_adapter_tensor(p.key())) p.value().normal_(0, 0.3);
  }
  const auto dir = testing::scratch_path(name).string();
  save_checkpoint(dir, model, nullptr, nullptr, {{"step", 1}});
  return dir;
}

LoraConfig lora(int64_t rank, std::vector<std::string> targets, double alpha = 16.0) {
  LoraConfig c;
  c.rank = rank, c.alpha = alpha, c.dropout = 0.0, c.targets = std::move(targets);
  return c;
}

// Three adapters of different ranks, targets and scales on one base, and the base.
struct Adapters {
  std::string base = save_base("bank-base", 1);
  std::vector<std::string> dirs = {save_adapter("bank-a", base, lora(2, {"q", "v"}), 2),
                                   save_adapter("bank-b", base, lora(4, {"all"}), 3),
                                   save_adapter("bank-c", base, lora(3, {"k", "up", "down"}, 6.0), 4)};
};
const Adapters& adapters() {
  static const Adapters a;
  return a;
}

// The model a LoRA checkpoint loads as (its adapters attached, not merged): the reference.
Model alone(const std::string& dir) {
  Model model = load_checkpoint(dir).model;
  model.module()->eval();
  return model;
}

torch::Tensor next_logits(Model& model, const std::vector<int64_t>& context) {
  c10::InferenceMode inference;
  return model.gpt->next_token_logits(torch::tensor(context, torch::kLong).unsqueeze(0), {}, nullptr)
      .to(torch::kFloat)[0];
}

// served_update against its plain reference: rows of one slot, of several, and of the base.
TEST(ServedAdapters, EachRowTakesItsOwnSlotsUpdate) {
  torch::manual_seed(0);
  const auto A = torch::randn({3, 4, 8}, torch::kDouble), B = torch::randn({6, 3, 4}, torch::kDouble);
  // A decoding step's tokens (every slot at once, masked) and a prefill's (each slot's rows apart).
  for (const int64_t tokens : {1, 5, 40}) {
    const auto x = torch::randn({4, tokens, 8}, torch::kDouble);
    for (const std::vector<int64_t>& slots : std::vector<std::vector<int64_t>>{
             {2, 2, 2, 2}, {0, 1, 2, 1}, {-1, 2, -1, 0}, {-1, -1, -1, -1}}) {
      const AdapterRows rows(slots);
      const auto expected = served_update_reference(slots, x, A, B);
      if (rows.uniform == AdapterRows::kNone) {
        EXPECT_EQ(expected.abs().max().item<double>(), 0.0);
        continue;
      }
      EXPECT_LT(testing::max_abs_diff(served_update(rows, x, A, B), expected), 1e-12) << c10::str(slots) << tokens;
    }
  }
}

// Rows of three adapters and the base, prefilled together and decoded together, each give its
// adapter's model alone (the LoRA checkpoint loaded as training left it) at every step.
TEST(AdapterBank, MixedRowsEqualEachAdapterAlone) {
  const auto& a = adapters();
  Model base = load_checkpoint(a.base).model;
  base.module()->eval();
  AdapterBank bank(base, a.base);
  std::vector<std::shared_ptr<const ServedAdapter>> served;
  for (size_t i = 0; i < a.dirs.size(); ++i) served.push_back(bank.install(bank.read("a" + std::to_string(i), a.dirs[i])));
  std::vector<Model> references;
  for (const auto& dir : a.dirs) references.push_back(alone(dir));
  Model plain = load_checkpoint(a.base).model;
  plain.module()->eval();
  references.push_back(plain);
  const std::vector<int64_t> slots = {served[0]->slot, served[1]->slot, served[2]->slot, -1};
  std::vector<std::vector<int64_t>> contexts = {{5, 9, 3, 7, 11}, {4, 8}, {12, 1, 6, 2, 9, 30, 7}, {3, 3, 14}};

  ModelRunner runner(base, 4, 16);
  c10::InferenceMode inference;
  std::vector<const std::vector<int64_t>*> prompts;
  for (const auto& c : contexts) prompts.push_back(&c);
  auto read = runner.prefill(prompts, slots);
  for (int64_t i = 0; i < 4; ++i) {
    runner.place(read.cache, i, read.positions[i], 0, slots[i]);
  }
  auto logits = read.logits;
  for (int step = 0; step < 4; ++step) {
    std::vector<int64_t> next;
    for (size_t i = 0; i < contexts.size(); ++i) {
      const auto expected = next_logits(references[i], contexts[i]);
      EXPECT_LT(testing::max_abs_diff(logits[static_cast<int64_t>(i)], expected), 1e-4) << "row " << i << " step " << step;
      next.push_back(expected.argmax().item<int64_t>());
      contexts[i].push_back(next.back());
    }
    if (step == 2) {
      // The second row leaves and the last moves into it, keeping its own adapter.
      runner.remove_row(1);
      contexts[1] = contexts.back(), references[1] = references.back(), next[1] = next.back();
      contexts.pop_back(), references.pop_back(), next.pop_back();
    }
    logits = runner.step(next);
  }
  // A chunk read alone, with one adapter: two matmuls, no gather.
  auto cache = runner.chunk_cache();
  const auto chunk = runner.read_chunk({7, 8, 9}, cache, served[2]->slot)[0];
  Model third = alone(a.dirs[2]);
  EXPECT_LT(testing::max_abs_diff(chunk, next_logits(third, {7, 8, 9})), 1e-4);
}

// A PEFT directory (zoo's export of an adapter) serves as that adapter.
TEST(AdapterBank, PeftDirectoriesServeAsTheirAdapters) {
  const auto& a = adapters();
  const Model adapted = alone(a.dirs[1]);
  const auto peft = testing::scratch_path("bank-peft").string();
  export_peft(adapted, peft);
  Model base = load_checkpoint(a.base).model;
  base.module()->eval();
  AdapterBank bank(base, "");  // no zoo base: PEFT adapters only
  const auto served = bank.install(bank.read("p", peft));
  ModelRunner runner(base, 2, 16);
  c10::InferenceMode inference;
  const std::vector<int64_t> prompt = {3, 14, 15, 9};
  auto read = runner.prefill({&prompt, &prompt}, {served->slot, -1});
  Model reference = alone(a.dirs[1]);
  EXPECT_LT(testing::max_abs_diff(read.logits[0], next_logits(reference, prompt)), 1e-4);
  Model plain = load_checkpoint(a.base).model;
  plain.module()->eval();
  EXPECT_LT(testing::max_abs_diff(read.logits[1], next_logits(plain, prompt)), 1e-4);
  EXPECT_NE(error_of([&] { bank.read("z", a.dirs[0]); }).find("no zoo checkpoint"), std::string::npos);
}

// Adapters that do not fit the base are refused by name: another base, a rank that is not the
// tensors', targets the model does not have, a PEFT adapter of another model's shapes.
TEST(AdapterBank, AdaptersThatDoNotFitAreRefusedByName) {
  const auto& a = adapters();
  Model base = load_checkpoint(a.base).model;
  AdapterBank bank(base, a.base);
  const auto other_base = save_base("bank-other-base", 9);
  const auto foreign = save_adapter("bank-foreign", other_base, lora(2, {"q"}), 5);
  EXPECT_NE(error_of([&] { bank.read("f", foreign); }).find("lora.json: trained on another base"), std::string::npos);

  const auto copy = [&](const std::string& name, const std::string& from) {
    const auto dir = testing::scratch_path(name);
    fs::remove_all(dir);
    fs::copy(from, dir, fs::copy_options::recursive);
    return dir.string();
  };
  auto rewrite = [&](const std::string& dir, const std::string& from, const std::string& to) {
    const auto path = (fs::path(dir) / "lora.json").string();
    auto text = read_file(path);
    const auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << text;
    write_file_atomically(path, text.replace(at, from.size(), to));
  };
  const auto wrong_rank = copy("bank-wrong-rank", a.dirs[0]);
  rewrite(wrong_rank, "\"rank\": 2", "\"rank\": 3");
  const auto message = error_of([&] { bank.read("r", wrong_rank); });
  EXPECT_NE(message.find("tensor 'blocks.0.self_attn.lora_q.A' has shape [2, 32]"), std::string::npos) << message;
  const auto wrong_targets = copy("bank-wrong-targets", a.dirs[0]);
  rewrite(wrong_targets, "\"v\"", "\"c_fc\"");
  EXPECT_NE(error_of([&] { bank.read("t", wrong_targets); }).find("lora.targets: 'c_fc' matches no projection"),
            std::string::npos);

  const auto wider_base = save_base("bank-wider-base", 1, std::string(kConfig).replace(std::string(kConfig).find("d_ff: 48"), 8, "d_ff: 40"));
  const auto wider = save_adapter("bank-wider", wider_base, lora(2, {"up"}), 6);
  const auto peft = testing::scratch_path("bank-wider-peft").string();
  export_peft(alone(wider), peft);
  const auto peft_message = error_of([&] { bank.read("w", peft); });
  EXPECT_NE(peft_message.find("mlp.up_proj: lora_A [2, 32] and lora_B [40, 2] do not fit the module (48 x 32)"),
            std::string::npos) << peft_message;
  EXPECT_NE(error_of([&] { bank.read("n", a.base); }).find("no lora.json"), std::string::npos);
}

// N adapters take N times one adapter's bytes (no copy of the base); a slot freed is reused; an
// adapter a request holds is not unloaded; names are unique.
TEST(AdapterBank, HoldsEachAdapterOnceAndUnloadsOnlyWhatNoRequestHolds) {
  const auto& a = adapters();
  Model base = load_checkpoint(a.base).model;
  AdapterBank bank(base, a.base);
  const int64_t bytes = bank.install(bank.read("x", a.dirs[1]))->bytes;
  EXPECT_EQ(bank.bytes(), bytes);
  // Rank 4 on every projection: (q, k, v, out, gate, up, down) A and B, two layers, float32.
  EXPECT_EQ(bytes, 2 * 4 * 4 * ((32 + 32) + (32 + 16) + (32 + 16) + (32 + 32) + (32 + 48) * 2 + (48 + 32)));
  for (const char* name : {"y", "z"}) bank.install(bank.read(name, a.dirs[1]));
  EXPECT_EQ(bank.bytes(), 3 * bytes);
  EXPECT_NE(error_of([&] { bank.install(bank.read("y", a.dirs[0])); }).find("'y' is served already"), std::string::npos);
  {
    const auto held = bank.find("y");
    EXPECT_THROW(bank.remove("y"), AdapterInUse);
  }
  const int64_t slot = bank.find("y")->slot;
  bank.remove("y");
  EXPECT_EQ(bank.find("y"), nullptr);
  EXPECT_THROW(bank.remove("y"), std::out_of_range);
  EXPECT_EQ(bank.install(bank.read("w", a.dirs[0]))->slot, slot);
  for (const char* name : {"x", "z", "w"}) bank.remove(name);
  EXPECT_EQ(bank.bytes(), 0);
  EXPECT_TRUE(bank.adapters().empty());
}

// A prompt's cached blocks are its adapter's: the same tokens under another adapter miss.
TEST(AdapterBank, PrefixCacheChainsStartFromTheAdapter) {
  const auto& a = adapters();
  Model base = load_checkpoint(a.base).model;
  base.module()->eval();
  ModelRunner runner(base, 1, 64);
  PrefixCache cache(1 << 20);
  std::vector<int64_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int64_t>(i % 50 + 3);
  c10::InferenceMode inference;
  auto read = runner.prefill({&prompt});
  cache.insert(prompt, read.cache, 0, /*root=*/77);
  EXPECT_EQ(cache.match(prompt, 77), PrefixCache::kBlockTokens);
  EXPECT_EQ(cache.match(prompt, 0), 0);
  EXPECT_EQ(cache.match(prompt, 78), 0);
}

}  // namespace
}  // namespace zoo
