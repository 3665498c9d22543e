// zoo corpus, tokenizer train|encode|decode, data prepare.

#include <filesystem>
#include <fstream>
#include <iterator>
#include <iostream>
#include <memory>

#include "apps/commands.h"
#include "core/files.h"
#include "core/line_reader.h"
#include "core/outputs.h"
#include "data/chat_format.h"
#include "data/corpus.h"
#include "data/example_files.h"
#include "data/token_file.h"
#include "data/token_lines.h"
#include "data/tokenize.h"
#include "tokenizers/tokenizer.h"

namespace zoo::cli {
namespace {

const char* const kTokenizerHelp =
    "tokenizer: zoo's PREFIX or PREFIX.model, a tokenizer.json, or a Hugging Face model directory";

namespace fs = std::filesystem;

// Calls `each(line, "file:line")` for the lines of the files, or of standard input without files.
template <typename F>
void for_each_line(const std::vector<std::string>& files, F each) {
  // Bounded lines: a 100 MB line is an error naming it, not gigabytes of tokens.
  std::string line;
  if (files.empty()) {
    LineReader lines(std::cin, "<stdin>");
    while (lines.next(line)) each(line, lines.where());
    return;
  }
  for (const auto& f : files) {
    if (fs::is_directory(f)) throw std::runtime_error(f + ": is a directory, not a file of lines");
    std::ifstream in(f, std::ios::binary);
    if (!in) throw std::runtime_error(f + ": cannot open (no such file, or not readable)");
    LineReader lines(in, f);
    while (lines.next(line)) each(line, lines.where());
  }
}

std::vector<std::string> data_or_default(const std::vector<std::string>& data) {
  if (!data.empty()) return data;
  const std::string corpus = ensure_default_corpus();
  std::cerr << "using the default corpus " << corpus << "\n";
  return {corpus};
}

int corpus_command(const std::string& out_option) {
  const std::string out = out_option.empty() ? default_corpus_path() : out_option;
  std::error_code ec;
  if (fs::is_directory(out, ec)) throw std::runtime_error(out + ": is a directory; a file name is expected here");
  if (!out_option.empty() && fs::exists(out, ec)) {
    // Plain text cannot say who wrote it: only a file that already holds exactly this corpus is
    // left as it is; anything else is the user's.
    const std::string fresh = temporary_path_for(out);
    build_default_corpus(fresh);
    const bool same = read_file(fresh) == read_file(out);
    fs::remove(fresh, ec);
    if (!same) {
      throw std::runtime_error(out + ": exists and is not the default corpus; zoo never replaces what it did not "
                                     "write: choose another path");
    }
    std::cout << out << " is up to date (" << fs::file_size(out) << " bytes)\n";
    return 0;
  }
  const int64_t documents = build_default_corpus(out);
  std::cout << "wrote " << out << " (" << documents << " documents, " << fs::file_size(out) << " bytes)\n";
  return 0;
}

struct TokenizerTrainArgs {
  TokenizerTrainOptions options;
  std::string out, model_type = "unigram";
  bool overwrite = false;
};

int tokenizer_train_command(TokenizerTrainArgs a) {
  a.options.kind = from_string<TokenizerKind>(a.model_type);
  // A prefix, not a folder: "DIR/" would write the hidden files DIR/.model and DIR/.vocab.
  std::error_code dir_ec;
  if (a.out.empty() || a.out.ends_with('/') || fs::is_directory(a.out, dir_ec)) {
    throw std::runtime_error("--out " + a.out + ": a folder; give a file prefix such as " +
                             (fs::path(a.out) / "tokenizer").string() + " (writes tokenizer.model and tokenizer.vocab there)");
  }
  // PREFIX.model and PREFIX.vocab: replaced only when they are a tokenizer zoo trained.
  const std::string model = a.out + ".model", vocab = a.out + ".vocab";
  std::error_code ec;
  const bool replacing = check_output(model, OutputKind::kTokenizerModel, a.overwrite) == OutputState::kReplace;
  if (!replacing && fs::exists(vocab, ec)) {
    throw std::runtime_error(vocab + ": exists without the tokenizer model beside it; zoo never replaces what it "
                                     "did not write: choose another --out");
  }
  a.options.inputs = data_or_default(a.options.inputs);
  std::cerr << "training a " << a.model_type << " tokenizer of " << a.options.vocab_size << " pieces...\n";
  const auto t = Tokenizer::train(a.options, a.out);
  if (replacing) say_replaced(model, "the tokenizer");
  std::cout << "wrote " << model << " and " << vocab << " (" << t.vocab_size() << " pieces, hash " << t.hash_hex()
            << ")\n";
  return 0;
}

struct TokenizerCodeArgs {
  std::string model;
  std::vector<std::string> files;
  bool pieces = false;
};

int tokenizer_encode_command(const TokenizerCodeArgs& a) {
  const auto t = Tokenizer::load(a.model);
  for_each_line(a.files, [&](const std::string& line, const std::string& where) {
    std::cout << encode_line(t, line, a.pieces, where) << "\n";
  });
  return 0;
}

int tokenizer_decode_command(const TokenizerCodeArgs& a) {
  const auto t = Tokenizer::load(a.model);
  for_each_line(a.files, [&](const std::string& line, const std::string& where) {
    std::cout << t.decode(parse_token_ids(line, t.vocab_size(), where)) << "\n";
  });
  return 0;
}

struct DataPrepareArgs {
  std::string tokenizer, out;
  std::vector<std::string> inputs;
  TokenizeOptions options;
  bool overwrite = false;
};

int data_prepare_command(const DataPrepareArgs& a) {
  const auto t = Tokenizer::load(a.tokenizer);
  const bool replacing = check_output(a.out, OutputKind::kTokenDirectory, a.overwrite) == OutputState::kReplace;
  const auto inputs = data_or_default(a.inputs);
  CreatedDirectory out(a.out);  // removed again if tokenizing fails
  const auto stats = tokenize_to_files(inputs, t, a.out, a.options);
  write_output_marker(a.out, OutputKind::kTokenDirectory);
  out.keep();
  if (replacing) say_replaced(a.out, "the token files");
  std::cout << "wrote " << a.out << "/train.tokens (" << stats.train_documents << " documents, " << stats.train_tokens
            << " tokens) and " << a.out << "/val.tokens (" << stats.val_documents << " documents, "
            << stats.val_tokens << " tokens)\n";
  return 0;
}

struct TokenizerChatArgs {
  std::string model, file;
  bool generation_prompt = false;
};

// Prints a conversation as the tokenizer's chat template renders it: the text a model is given.
int tokenizer_chat_command(const TokenizerChatArgs& a) {
  const Tokenizer tokenizer = Tokenizer::load(a.model);
  const ChatFormat chat(tokenizer, a.model);
  std::string text;
  if (a.file.empty()) {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    text = read_file(a.file);
  }
  std::cout << chat.render(parse_conversation(text, a.file.empty() ? "<stdin>" : a.file), a.generation_prompt);
  return 0;
}

}  // namespace

std::vector<Command> add_text_commands(CLI::App& app) {
  std::vector<Command> commands;
  auto corpus_out = std::make_shared<std::string>();
  auto* corpus = app.add_subcommand("corpus", "build the default corpus (plain text of the Python docs)");
  corpus->add_option("--out", *corpus_out, "where to write it (default: the cache path zoo reads)");
  commands.push_back({corpus, [corpus_out] { return corpus_command(*corpus_out); }});

  auto* tokenizer = app.add_subcommand("tokenizer", "train zoo's SentencePiece tokenizers; encode and decode with any tokenizer");
  tokenizer->require_subcommand(1);
  auto tr = std::make_shared<TokenizerTrainArgs>();
  auto* train = tokenizer->add_subcommand("train", "train a tokenizer with zoo's special tokens");
  train->add_option("--input", tr->options.inputs, "text files or directories (default: the default corpus)");
  train->add_option("--vocab-size", tr->options.vocab_size, "vocabulary size")->check(positive_integer());
  train->add_option("--model-type", tr->model_type, "unigram or bpe")->check(CLI::IsMember(enum_names<TokenizerKind>()));
  train->add_option("--out", tr->out, "output prefix: writes PREFIX.model and PREFIX.vocab")->required();
  train->add_option("--seed", tr->options.seed, "sampling seed")->check(non_negative_integer());
  train->add_option("--max-sentences", tr->options.max_sentences, "lines sampled for training (0 = all)")
      ->check(non_negative_integer());
  train->add_flag("--skip-invalid-utf8", tr->options.skip_invalid_utf8, "skip invalid lines instead of failing");
  train->add_flag("--verbose", tr->options.verbose, "show SentencePiece's training log");
  add_overwrite_flag(train, tr->overwrite, "a tokenizer");
  commands.push_back({train, [tr] { return tokenizer_train_command(*tr); }});

  auto code = std::make_shared<TokenizerCodeArgs>();
  // encode and decode take the same tokenizer and inputs.
  auto add_code_command = [&](const char* name, const char* what, int (*run)(const TokenizerCodeArgs&)) {
    auto* cmd = tokenizer->add_subcommand(name, what);
    cmd->add_option("--model", code->model, kTokenizerHelp)->required();
    cmd->add_option("files", code->files, "input files (default: standard input)");
    commands.push_back({cmd, [code, run] { return run(*code); }});
    return cmd;
  };
  add_code_command("encode", "text lines to ids (or pieces), one line each", tokenizer_encode_command)
      ->add_flag("--pieces", code->pieces, "print pieces instead of ids");
  add_code_command("decode", "lines of ids to text", tokenizer_decode_command);
  auto chat = std::make_shared<TokenizerChatArgs>();
  auto* chat_cmd = tokenizer->add_subcommand("chat", "a conversation (JSON messages) as the model's chat template renders it");
  chat_cmd->add_option("--model", chat->model, "a Hugging Face model directory (or tokenizer) with a chat template")->required();
  chat_cmd->add_option("file", chat->file, "JSON: [{\"role\": ..., \"content\": ...}, ...] or {\"messages\": [...]} (default: standard input)");
  chat_cmd->add_flag("--generation-prompt", chat->generation_prompt, "end with the assistant's turn opened (add_generation_prompt)");
  commands.push_back({chat_cmd, [chat] { return tokenizer_chat_command(*chat); }});

  auto* data = app.add_subcommand("data", "turn text into token files for training");
  data->require_subcommand(1);
  auto d = std::make_shared<DataPrepareArgs>();
  auto* prepare = data->add_subcommand("prepare", "tokenize text into OUT/train.tokens and OUT/val.tokens");
  prepare->add_option("--tokenizer", d->tokenizer, kTokenizerHelp)->required();
  prepare->add_option("--data", d->inputs, "text files or directories (default: the default corpus)");
  prepare->add_flag("--skip-invalid-utf8", d->options.skip_invalid_utf8, "skip invalid lines instead of failing");
  prepare->add_option("--out", d->out, "output directory")->required();
  prepare->add_option("--val-fraction", d->options.val_fraction, "share of documents for validation, in [0, 1)")
      ->check(fraction());
  prepare->add_option("--seed", d->options.seed, "which documents go to validation")->check(non_negative_integer());
  add_overwrite_flag(prepare, d->overwrite, "token files");
  commands.push_back({prepare, [d] { return data_prepare_command(*d); }});
  return commands;
}

}  // namespace zoo::cli
