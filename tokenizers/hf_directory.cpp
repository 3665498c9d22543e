#include "tokenizers/hf_directory.h"

#include <filesystem>
#include <algorithm>
#include <stdexcept>

#include "tokenizers/hf_config.h"
#include "tokenizers/hf_tokenizer.h"
#include "tokenizers/hf_vocab_files.h"
#include "tokenizers/sentencepiece_tokenizer.h"

namespace zoo {
namespace {

std::string path_in(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

// The files a backend keeps: `model_files` and whichever configs are present.
TokenizerFiles keep(const TokenizerFiles& files, std::initializer_list<const char*> model_files) {
  TokenizerFiles kept;
  for (const char* name : model_files) {
    if (const auto it = files.find(name); it != files.end()) kept.insert(*it);
  }
  for (const char* name : {kTokenizerConfigJson, kSpecialTokensMapJson, kAddedTokensJson, kChatTemplateJinja}) {
    if (const auto it = files.find(name); it != files.end()) kept.insert(*it);
  }
  return kept;
}

// T5Tokenizer's sentinels: <extra_id_i> at id (model size + count - 1 - i), so <extra_id_0> is
// the last id; they swallow the spaces around them.
std::vector<std::pair<int64_t, AddedToken>> t5_sentinels(int64_t model_size, int64_t count) {
  std::vector<std::pair<int64_t, AddedToken>> sentinels;
  for (int64_t i = 0; i < count; ++i) {
    AddedToken t;
    t.content = "<extra_id_" + std::to_string(i) + ">";
    t.lstrip = t.rstrip = true;
    t.special = true;
    t.normalized = false;
    sentinels.emplace_back(model_size + count - 1 - i, t);
  }
  return sentinels;
}

std::shared_ptr<const TokenizerEngine> sentencepiece_engine(const TokenizerFiles& files, const std::string& file,
                                                            HfConfig& config, const std::string& dir) {
  auto processor = SentencePieceProcessor::load(files.at(file), path_in(dir, file));
  std::string cls = config.base_class();
  if (cls.empty()) cls = file == kSentencePieceT5File ? "T5Tokenizer" : "LlamaTokenizer";
  SentencePieceSpecials specials;
  std::vector<std::pair<int64_t, AddedToken>> implicit;
  if (cls == "T5Tokenizer") {
    specials.convention = SentencePieceConvention::kT5;
    default_role(config, "eos", "</s>");
    default_role(config, "unk", "<unk>");
    default_role(config, "pad", "<pad>");
    specials.add_eos = true;
    const int64_t extra_ids = config.extra_ids.value_or(100);
    if (extra_ids < 0) throw std::runtime_error(path_in(dir, kTokenizerConfigJson) + ": extra_ids: must not be negative");
    implicit = t5_sentinels(processor.size(), extra_ids);
  } else if (cls == "LlamaTokenizer") {
    specials.convention = SentencePieceConvention::kLlama;
    default_role(config, "bos", "<s>");
    default_role(config, "eos", "</s>");
    default_role(config, "unk", "<unk>");
    specials.add_bos = config.add_bos_token.value_or(true);
    specials.add_eos = config.add_eos_token.value_or(false);
  } else {
    throw std::runtime_error(path_in(dir, kTokenizerConfigJson) + ": tokenizer_class: unsupported '" +
                             *config.tokenizer_class + "' for a SentencePiece model (zoo reads T5Tokenizer, "
                             "LlamaTokenizer)");
  }
  specials.bos_token = config.role("bos");
  specials.eos_token = config.role("eos");
  auto added = config_added_tokens(config, std::move(implicit));
  return std::make_shared<const SentencePieceTokenizer>(std::move(processor), std::move(added.with_ids),
                                                        std::move(added.by_content), specials);
}

// Roles a bare tokenizer.json implies: the model's unk token, and [CLS]/[SEP] (or BOS, EOS) from
// where its post-processor puts special tokens around a single sequence.
void infer_roles(const HfTokenizer& tokenizer, SpecialTokenIds& special) {
  if (!special.unk) {
    if (const auto unk = tokenizer.parts().model.unk_token()) special.unk = tokenizer.token_to_id(*unk);
  }
  if (!tokenizer.parts().post_processor) return;
  const PostProcessor* p = &*tokenizer.parts().post_processor;
  while (p->kind == PostProcessorKind::kSequence && !p->children.empty()) {
    // The first child that adds tokens decides.
    const auto it = std::find_if(p->children.begin(), p->children.end(),
                                 [](const PostProcessor& c) { return c.kind != PostProcessorKind::kByteLevel; });
    if (it == p->children.end()) return;
    p = &*it;
  }
  std::optional<int64_t> before, after;
  switch (p->kind) {
    case PostProcessorKind::kBert:
    case PostProcessorKind::kRoberta:
      before = p->cls_id;
      after = p->sep_id;
      break;
    case PostProcessorKind::kTemplate: {
      bool seen_sequence = false;
      int specials_before = 0, specials_after = 0;
      for (const auto& piece : p->single) {
        if (piece.is_sequence) {
          seen_sequence = true;
          continue;
        }
        const auto& ids = p->special_tokens.at(piece.special);
        if (ids.size() != 1) continue;
        if (seen_sequence) {
          if (specials_after++ == 0) after = ids.front();
        } else if (specials_before++ == 0) {
          before = ids.front();
        }
      }
      break;
    }
    case PostProcessorKind::kByteLevel:
    case PostProcessorKind::kSequence:
      break;
  }
  if (before && after) {
    if (!special.cls) special.cls = before;
    if (!special.sep) special.sep = after;
  } else if (before) {
    if (!special.bos) special.bos = before;
  } else if (after) {
    if (!special.eos) special.eos = after;
  }
}

SpecialTokenIds resolve_special(const TokenizerEngine& engine, const HfConfig& config) {
  SpecialTokenIds s;
  const std::pair<const char*, std::optional<int64_t>*> roles[] = {
      {"pad", &s.pad}, {"unk", &s.unk}, {"bos", &s.bos}, {"eos", &s.eos},
      {"cls", &s.cls}, {"sep", &s.sep}, {"mask", &s.mask}};
  for (const auto& [role, slot] : roles) {
    if (const auto content = config.role(role)) *slot = engine.token_to_id(*content);
  }
  for (int64_t i = 0;; ++i) {
    const auto id = engine.token_to_id("<extra_id_" + std::to_string(i) + ">");
    if (!id) break;
    s.sentinels.push_back(*id);
  }
  return s;
}

}  // namespace

const std::vector<std::string>& hf_tokenizer_file_names() {
  static const std::vector<std::string> names = {
      kTokenizerJson, kGpt2VocabJson, kGpt2MergesTxt, kBertVocabTxt, kSentencePieceT5File, kSentencePieceModelFile,
      kTokenizerConfigJson, kSpecialTokensMapJson, kAddedTokensJson, kChatTemplateJinja};
  return names;
}

HfDirectory read_hf_directory(const TokenizerFiles& files, const std::string& dir, const std::string& json_name) {
  HfConfig config = read_hf_config(files, dir);
  const auto has = [&](const char* name) { return files.count(name) > 0; };
  HfDirectory out;
  const HfTokenizer* pipeline = nullptr;
  if (has(kTokenizerJson)) {
    out.kind = TokenizerBackend::kTokenizerJson;
    auto t = std::make_shared<const HfTokenizer>(HfTokenizer::from_json(files.at(kTokenizerJson), json_name.empty() ? path_in(dir, kTokenizerJson) : json_name));
    pipeline = t.get();
    out.engine = t;
    out.files = keep(files, {kTokenizerJson});
  } else if (has(kGpt2VocabJson) && has(kGpt2MergesTxt)) {
    out.kind = TokenizerBackend::kGpt2Files;
    out.engine = std::make_shared<const HfTokenizer>(gpt2_pipeline(files, config, dir));
    out.files = keep(files, {kGpt2VocabJson, kGpt2MergesTxt});
  } else if (has(kBertVocabTxt)) {
    out.kind = TokenizerBackend::kBertVocab;
    out.engine = std::make_shared<const HfTokenizer>(bert_pipeline(files, config, dir));
    out.files = keep(files, {kBertVocabTxt});
  } else if (has(kSentencePieceT5File) || has(kSentencePieceModelFile)) {
    const char* file = has(kSentencePieceT5File) ? kSentencePieceT5File : kSentencePieceModelFile;
    // A checkpoint directory of zoo's holds its own tokenizer.model and no transformers config.
    const bool has_config = has(kTokenizerConfigJson) || has(kSpecialTokensMapJson);
    if (file == kSentencePieceModelFile && !has_config) {
      auto processor = SentencePieceProcessor::load(files.at(file), path_in(dir, file));
      if (SentencePieceTokenizer::has_zoo_layout(processor)) {
        out.kind = TokenizerBackend::kZooSentencePiece;
        out.engine = SentencePieceTokenizer::zoo(processor);
        out.files = {{file, files.at(file)}};
        return out;
      }
    }
    out.kind = TokenizerBackend::kHfSentencePiece;
    out.engine = sentencepiece_engine(files, file, config, dir);
    out.files = keep(files, {file});
  } else if (has(kGpt2VocabJson)) {
    throw std::runtime_error(path_in(dir, kGpt2VocabJson) + ": found without merges.txt (GPT-2's BPE needs both)");
  } else {
    throw std::runtime_error(dir + ": no tokenizer (looked for tokenizer.json, vocab.json + merges.txt, vocab.txt, "
                             "spiece.model, tokenizer.model)");
  }
  out.special = resolve_special(*out.engine, config);
  if (pipeline != nullptr) infer_roles(*pipeline, out.special);
  out.chat_template = config.chat_template;
  for (const auto& [role, token] : config.roles) out.special_token_texts[role] = token.content;
  out.model_max_length = config.model_max_length;
  return out;
}

}  // namespace zoo
