#include "data/objectives.h"

#include <filesystem>
#include <numeric>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/files.h"
#include "reference_texts.h"
#include "test_util.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

fs::path scratch(const std::string& name) { return testing::scratch_path(name); }

const Tokenizer& tokenizer() {
  static const Tokenizer t = testing::train_tokenizer("tok", 200000, 1000);
  return t;
}

// Random documents of ordinary (non-special) tokens.
std::vector<std::vector<int64_t>> random_documents(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int64_t>> docs(n);
  for (auto& d : docs) {
    d.resize(5 + rng() % 60);
    for (auto& t : d) t = SpecialTokens::kCount + static_cast<int64_t>(rng() % (vocab - SpecialTokens::kCount));
  }
  return docs;
}

TEST(CausalLM, BlocksConcatenateToTheStreamWithNothingLostOrRepeated) {
  auto path = scratch("lm.tokens").string();
  write_token_file(path, random_documents(50, 1000, 1), 1000, 1);
  auto file = TokenFile::open(path);
  for (int64_t block : {1, 7, 64, 5000}) {
    CausalLMDataset data(file, block);
    std::vector<int64_t> inputs, targets;
    for (int64_t b = 0; b < data.size(); ++b) {
      auto [x, y] = data.example(b);
      EXPECT_EQ(x.size(), y.size());
      EXPECT_LE(static_cast<int64_t>(x.size()), block);
      inputs.insert(inputs.end(), x.begin(), x.end());
      targets.insert(targets.end(), y.begin(), y.end());
    }
    auto stream = file.tokens(0, file.size());
    EXPECT_EQ(inputs, std::vector<int64_t>(stream.begin(), stream.end() - 1)) << "block " << block;
    EXPECT_EQ(targets, std::vector<int64_t>(stream.begin() + 1, stream.end())) << "block " << block;
  }
  // Document separators are in the blocks.
  CausalLMDataset data(file, 64);
  auto batch = data.batch({0, data.size() - 1});
  EXPECT_EQ(batch.input_ids.sizes(), (std::vector<int64_t>{2, 64}));
  EXPECT_GT(batch.input_ids[0].eq(SpecialTokens::kEos).sum().item<int64_t>(), 0);
  // The short last block is padded and its padding ignored by the loss.
  const int64_t real = (file.size() - 1) - (data.size() - 1) * 64;
  EXPECT_EQ(batch.labels[1].ne(kIgnoreIndex).sum().item<int64_t>(), real);
  EXPECT_EQ(batch.attention_mask[1].sum().item<int64_t>(), real);
}

TEST(Sampler, SeededOrderCoversEveryIndexAndResumes) {
  ShuffledSampler a(100, 5);
  auto first = a.next(100);
  auto sorted = first;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(100);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);
  EXPECT_NE(first, all);  // shuffled
  auto second_epoch = a.next(30);
  EXPECT_NE(std::vector<int64_t>(first.begin(), first.begin() + 30), second_epoch);
  // Save, continue, restore into a fresh sampler: the same indices follow.
  auto state = a.state();
  auto continued = a.next(150);
  ShuffledSampler b(100, 5);
  b.restore(state);
  EXPECT_EQ(b.next(150), continued);
  EXPECT_EQ(ShuffledSampler(100, 5).next(100), first);
  EXPECT_NE(ShuffledSampler(100, 6).next(100), first);
  EXPECT_THROW(b.restore({0, 101}), std::runtime_error);
}

TEST(MaskedLM, MaskingStatisticsOver100kTokens) {
  const auto& t = tokenizer();
  std::mt19937_64 gen(3);
  std::vector<int64_t> ids(100000);
  for (size_t i = 0; i < ids.size(); ++i) {
    // Every 10th token is special ([SEP]): never chosen.
    ids[i] = i % 10 == 0 ? SpecialTokens::kSep : SpecialTokens::kCount + static_cast<int64_t>(gen() % (t.vocab_size() - SpecialTokens::kCount));
  }
  auto rng = example_rng(1, 0, 0);
  auto [inputs, labels] = mask_tokens(ids, t, BatchTokens::of(t), MaskingOptions{}, rng);
  int64_t chosen = 0, masked = 0, random = 0, kept = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i % 10 == 0) {
      EXPECT_EQ(labels[i], kIgnoreIndex);
      EXPECT_EQ(inputs[i], SpecialTokens::kSep);
      continue;
    }
    if (labels[i] == kIgnoreIndex) {
      EXPECT_EQ(inputs[i], ids[i]);
      continue;
    }
    ++chosen;
    EXPECT_EQ(labels[i], ids[i]);
    if (inputs[i] == SpecialTokens::kMask) ++masked;
    else if (inputs[i] == ids[i]) ++kept;
    else {
      ++random;
      EXPECT_FALSE(t.is_special(inputs[i]));
    }
  }
  const double eligible = 90000.0;
  // Binomial standard deviations: ~0.12% for the 15%, ~0.35% for the 80/10/10 split.
  EXPECT_NEAR(chosen / eligible, 0.15, 0.006);
  EXPECT_NEAR(double(masked) / chosen, 0.8, 0.015);
  EXPECT_NEAR(double(random) / chosen, 0.1, 0.012);  // a random draw can repeat the token: rare
  EXPECT_NEAR(double(kept) / chosen, 0.1, 0.012);
}

TEST(MaskedLM, WholeWordMaskingTakesEveryPieceOfAWord) {
  const auto& t = tokenizer();
  auto ids = t.encode(read_file(testing::shared_corpus()).substr(0, 20000));
  MaskingOptions o;
  o.whole_word = true;
  o.probability = 0.3;
  auto rng = example_rng(2, 0, 0);
  auto [inputs, labels] = mask_tokens(ids, t, BatchTokens::of(t), o, rng);
  int64_t words = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!t.starts_word(ids[i]) || t.is_special(ids[i])) continue;
    size_t end = i + 1;
    while (end < ids.size() && !t.starts_word(ids[end]) && !t.is_special(ids[end])) ++end;
    const bool first = labels[i] != kIgnoreIndex;
    for (size_t k = i; k < end; ++k) EXPECT_EQ(labels[k] != kIgnoreIndex, first) << "word at " << i;
    words += end - i > 1;
  }
  EXPECT_GT(words, 100);  // multi-piece words were there to test
}

TEST(MaskedLM, SentencePairsAreLaidOutAsBert) {
  const auto& t = tokenizer();
  auto path = scratch("mlm.tokens").string();
  auto docs = random_documents(40, t.vocab_size(), 4);
  write_token_file(path, docs, t.vocab_size(), t.hash());
  auto file = TokenFile::open(path, &t);
  for (auto pairs : {SentencePairs::kNextSentence, SentencePairs::kSentenceOrder}) {
    MaskingOptions none;
    none.probability = 0.0;  // see the layout unmasked
    MaskedLMDataset data(file, t, 32, none, pairs, 9);
    int64_t positives = 0;
    for (int64_t i = 0; i < data.size(); ++i) {
      auto ex = data.example(i);
      ASSERT_LE(ex.input_ids.size(), 32u);
      EXPECT_EQ(ex.input_ids.front(), SpecialTokens::kCls);
      EXPECT_EQ(ex.input_ids.back(), SpecialTokens::kSep);
      const auto sep = std::find(ex.input_ids.begin() + 1, ex.input_ids.end(), SpecialTokens::kSep) - ex.input_ids.begin();
      for (size_t k = 0; k < ex.token_type_ids.size(); ++k) EXPECT_EQ(ex.token_type_ids[k], k <= size_t(sep) ? 0 : 1);
      positives += ex.next_sentence_label;
      if (pairs == SentencePairs::kSentenceOrder && ex.next_sentence_label == 0) {
        // In order: A then B is a prefix of its document.
        std::vector<int64_t> joined(ex.input_ids.begin() + 1, ex.input_ids.begin() + sep);
        joined.insert(joined.end(), ex.input_ids.begin() + sep + 1, ex.input_ids.end() - 1);
        bool found = false;
        for (const auto& d : docs) found |= std::equal(joined.begin(), joined.end(), d.begin(), d.begin() + std::min(d.size(), joined.size()));
        EXPECT_TRUE(found) << "example " << i;
      }
    }
    EXPECT_GT(positives, data.size() / 5);
    EXPECT_LT(positives, data.size() * 4 / 5);
    auto batch = data.batch({0, 1, 2});
    EXPECT_EQ(batch.next_sentence_labels.size(0), 3);
  }
  // The same (seed, epoch, index) gives the same masked example; another epoch re-masks.
  MaskedLMDataset data(file, t, 32, MaskingOptions{}, SentencePairs::kNone, 9);
  EXPECT_EQ(data.example(3).input_ids, data.example(3).input_ids);
  EXPECT_NE(data.example(3, 0).labels, data.example(3, 1).labels);
}

// zoo's fixed special ids, as a zoo tokenizer reports them.
BatchTokens zoo_tokens() { return BatchTokens::of(tokenizer()); }

TEST(SpanCorruption, OriginalIsRebuiltFromInputAndTarget) {
  std::mt19937_64 gen(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> tokens(2 + gen() % 300);
    for (auto& x : tokens) x = SpecialTokens::kCount + static_cast<int64_t>(gen() % 500);
    auto rng = example_rng(7, 0, trial);
    auto [inputs, targets] = corrupt_spans(tokens, SpanCorruptionOptions{}, zoo_tokens(), rng);
    ASSERT_EQ(inputs.back(), SpecialTokens::kEos);
    ASSERT_EQ(targets.back(), SpecialTokens::kEos);
    // Each sentinel in the input stands for the tokens after the same sentinel in the target.
    std::vector<int64_t> rebuilt;
    int64_t sentinels = 0;
    for (size_t i = 0; i + 1 < inputs.size(); ++i) {
      const int64_t x = inputs[i];
      if (x < SpecialTokens::kFirstSentinel || x >= SpecialTokens::kCount) {
        rebuilt.push_back(x);
        continue;
      }
      ASSERT_EQ(x, SpecialTokens::kFirstSentinel + sentinels++);  // numbered in order
      auto at = std::find(targets.begin(), targets.end(), x);
      ASSERT_NE(at, targets.end());
      for (++at; *at != SpecialTokens::kEos && (*at < SpecialTokens::kFirstSentinel || *at >= SpecialTokens::kCount); ++at) {
        rebuilt.push_back(*at);
      }
    }
    ASSERT_EQ(rebuilt, tokens) << "trial " << trial;
    // About 15% noise in spans of about 3.
    const double noise = double(targets.size() - 1 - sentinels);
    EXPECT_NEAR(noise / tokens.size(), 0.15, 0.5 / tokens.size() + 1e-9 + (tokens.size() < 10 ? 0.5 : 0.0));
  }
}

TEST(SpanCorruption, BatchesShiftTargetsIntoDecoderInputs) {
  auto path = scratch("span.tokens").string();
  write_token_file(path, random_documents(30, 1000, 5), 1000, 1);
  auto file = TokenFile::open(path);
  SpanCorruptionDataset data(file, 64, SpanCorruptionOptions{}, 3, zoo_tokens());
  auto batch = data.batch({0, 1, 2});
  EXPECT_EQ(batch.decoder_input_ids.sizes(), batch.labels.sizes());
  EXPECT_EQ(batch.decoder_input_ids.select(1, 0).eq(SpecialTokens::kPad).all().item<bool>(), true);
  auto labels = batch.labels[0];
  const int64_t n = labels.ne(kIgnoreIndex).sum().item<int64_t>();
  EXPECT_TRUE(batch.decoder_input_ids[0].narrow(0, 1, n - 1).equal(labels.narrow(0, 0, n - 1)));
  EXPECT_EQ(labels[0].item<int64_t>(), SpecialTokens::kFirstSentinel);
}

// Special tokens come from the tokenizer: GPT-2's has an end-of-text token and no pad, mask or
// sentinel; BERT's vocab.txt has [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103.
TEST(BatchTokens, ComeFromTheTokenizerAndMissingOnesAreRefusedByName) {
  const auto gpt2 = Tokenizer::load(testing::reference_file("gpt2-files"));
  const auto g = BatchTokens::of(gpt2);
  ASSERT_TRUE(g.eos.has_value());
  EXPECT_EQ(*g.eos, 50256);
  EXPECT_EQ(g.pad, 50256);  // padded with its end-of-text, as GPT-2 fine-tuning does
  EXPECT_FALSE(g.mask.has_value());
  EXPECT_TRUE(g.sentinels.empty());
  EXPECT_EQ(g.ordinary.size(), 50256u);
  const std::vector<int64_t> ids{464, 3290, 318};
  auto rng = example_rng(1, 0, 0);
  EXPECT_EQ(error_of([&] { mask_tokens(ids, gpt2, g, MaskingOptions{}, rng); }),
            "masked LM needs a mask token, and the tokenizer has none");
  EXPECT_EQ(error_of([&] { corrupt_spans(ids, SpanCorruptionOptions{}, g, rng); }),
            "span corruption needs sentinel tokens (<extra_id_0>, ...), and the tokenizer has none");
  auto path = scratch("gpt2.tokens").string();
  write_token_file(path, {ids, ids}, gpt2.vocab_size(), 1);
  auto file = TokenFile::open(path);
  EXPECT_EQ(error_of([&] { SpanCorruptionDataset(file, 16, SpanCorruptionOptions{}, 3, g); }),
            "span corruption needs sentinel tokens (<extra_id_0>, ...), and the tokenizer has none");

  const auto bert = Tokenizer::load(testing::reference_file("bert-vocab"));
  const auto b = BatchTokens::of(bert);
  EXPECT_EQ(b.pad, 0);
  EXPECT_EQ(b.cls, std::optional<int64_t>(101));
  EXPECT_EQ(b.sep, std::optional<int64_t>(102));
  EXPECT_EQ(b.mask, std::optional<int64_t>(103));
  EXPECT_FALSE(b.eos.has_value());
  std::vector<int64_t> words(2000, 2003);  // "is"
  auto [inputs, labels] = mask_tokens(words, bert, b, MaskingOptions{}, rng);
  EXPECT_GT(std::count(inputs.begin(), inputs.end(), 103), 100);
  for (int64_t x : inputs) EXPECT_FALSE(x == 0 || (x >= 100 && x <= 102)) << x;  // no other special drawn
}

}  // namespace
}  // namespace zoo
