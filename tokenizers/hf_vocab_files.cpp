#include "tokenizers/hf_vocab_files.h"

#include <filesystem>
#include <stdexcept>

namespace zoo {
namespace {

std::string path_in(const std::string& dir, const char* name) { return (std::filesystem::path(dir) / name).string(); }

const std::string& file_in(const TokenizerFiles& files, const char* name, const std::string& dir) {
  const auto it = files.find(name);
  if (it == files.end()) throw std::runtime_error(path_in(dir, name) + ": missing");
  return it->second;
}

PostProcessor::TemplatePiece special_piece(const std::string& name, int64_t type_id) {
  return {false, false, name, type_id};
}

PostProcessor::TemplatePiece sequence_piece(bool second, int64_t type_id) { return {true, second, "", type_id}; }

// The id of a role's token in `model`, or an error naming the config entry.
int64_t role_id(const HfConfig& config, const std::string& role, const HfModel& model, const std::string& dir) {
  const std::string content = *config.role(role);
  const auto id = model.token_to_id(content);
  if (!id) {
    throw std::runtime_error(dir + ": the " + role + " token '" + content + "' is not in the vocabulary");
  }
  return *id;
}

void add_config_tokens(const HfConfig& config, HfPipelineParts& parts) {
  auto tokens = config_added_tokens(config);
  parts.added_tokens_with_ids = std::move(tokens.with_ids);
  parts.added_tokens = std::move(tokens.by_content);
}

}  // namespace

void default_role(HfConfig& config, const std::string& role, const std::string& content) {
  if (config.roles.count(role) > 0) return;
  AddedToken t;
  t.content = content;
  t.special = true;
  t.normalized = false;
  config.roles[role] = t;
}

HfPipelineParts gpt2_pipeline(const TokenizerFiles& files, HfConfig& config, const std::string& dir) {
  for (const char* role : {"unk", "bos", "eos"}) default_role(config, role, "<|endoftext|>");
  HfPipelineParts parts;
  parts.model.kind = HfModelKind::kBpe;
  parts.model.bpe = std::make_shared<const BpeModel>(
      BpeModel::from_gpt2_files(file_in(files, kGpt2VocabJson, dir), path_in(dir, kGpt2VocabJson),
                                file_in(files, kGpt2MergesTxt, dir), path_in(dir, kGpt2MergesTxt)));
  PreTokenizer byte_level;
  byte_level.kind = PreTokenizerKind::kByteLevel;
  byte_level.add_prefix_space = config.add_prefix_space.value_or(false);
  byte_level.use_regex = true;
  parts.pre_tokenizer = byte_level;
  Decoder decoder;
  decoder.kind = DecoderKind::kByteLevel;
  parts.decoder = decoder;
  if (config.add_bos_token.value_or(false)) {
    const std::string bos = *config.role("bos");
    PostProcessor p;
    p.kind = PostProcessorKind::kTemplate;
    p.special_tokens[bos] = {role_id(config, "bos", parts.model, dir)};
    p.single = {special_piece(bos, 0), sequence_piece(false, 0)};
    p.pair = {special_piece(bos, 0), sequence_piece(false, 0), sequence_piece(true, 1)};
    parts.post_processor = p;
  }
  add_config_tokens(config, parts);
  return parts;
}

HfPipelineParts bert_pipeline(const TokenizerFiles& files, HfConfig& config, const std::string& dir) {
  default_role(config, "unk", "[UNK]");
  default_role(config, "sep", "[SEP]");
  default_role(config, "pad", "[PAD]");
  default_role(config, "cls", "[CLS]");
  default_role(config, "mask", "[MASK]");
  HfPipelineParts parts;
  WordPieceOptions options;
  options.unk_token = *config.role("unk");
  parts.model.kind = HfModelKind::kWordPiece;
  parts.model.wordpiece = std::make_shared<const WordPieceModel>(
      WordPieceModel::from_vocab_txt(file_in(files, kBertVocabTxt, dir), path_in(dir, kBertVocabTxt), options));
  Normalizer normalizer;
  normalizer.kind = NormalizerKind::kBert;
  normalizer.clean_text = true;
  normalizer.handle_chinese_chars = config.tokenize_chinese_chars.value_or(true);
  normalizer.lowercase = config.do_lower_case.value_or(true);
  normalizer.strip_accents = config.strip_accents.value_or(normalizer.lowercase);
  parts.normalizer = normalizer;
  PreTokenizer pre_tokenizer;
  pre_tokenizer.kind = PreTokenizerKind::kBert;
  parts.pre_tokenizer = pre_tokenizer;
  const std::string cls = *config.role("cls"), sep = *config.role("sep");
  PostProcessor p;
  p.kind = PostProcessorKind::kTemplate;
  p.special_tokens[cls] = {role_id(config, "cls", parts.model, dir)};
  p.special_tokens[sep] = {role_id(config, "sep", parts.model, dir)};
  p.single = {special_piece(cls, 0), sequence_piece(false, 0), special_piece(sep, 0)};
  p.pair = {special_piece(cls, 0), sequence_piece(false, 0), special_piece(sep, 0), sequence_piece(true, 1),
            special_piece(sep, 1)};
  parts.post_processor = p;
  Decoder decoder;
  decoder.kind = DecoderKind::kWordPiece;
  decoder.affix = "##";
  decoder.cleanup = true;
  parts.decoder = decoder;
  add_config_tokens(config, parts);
  return parts;
}

}  // namespace zoo
