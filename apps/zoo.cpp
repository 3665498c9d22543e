// The zoo command line. Thin by design: parse, validate, call the library.

#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "apps/commands.h"
#include "core/runtime.h"
#include "models/config.h"
#include "models/model.h"
#include "text/corpus.h"
#include "text/token_file.h"
#include "text/tokenizer.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace {

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// zoo info: the resolved architecture and exact parameter counts.
int run_info(const std::string& name, const std::vector<std::string>& overrides, bool show_config) {
  const std::string path = zoo::find_config(name);
  zoo::ModelConfig config = zoo::load_config(path);
  for (const auto& o : overrides) zoo::apply_override(config, o, "override '" + o + "'");
  zoo::Model model = zoo::build_model(config);
  std::cout << "config: " << path << "\n" << zoo::describe(config);
  if (show_config) std::cout << "\nresolved config:\n" << zoo::to_yaml(config);
  std::cout << "\nparameters by module:\n";
  for (const auto& [module, count] : zoo::parameter_breakdown(*model.module())) {
    std::cout << "  " << std::left << std::setw(28) << module << std::right << std::setw(16)
              << with_commas(count) << "\n";
  }
  const int64_t total = zoo::count_parameters(*model.module());
  std::cout << "parameters: " << total << " (" << with_commas(total) << ")\n";
  return 0;
}

// Reads lines from the files, or standard input when there are none, and calls `each`.
template <typename F>
void for_each_line(const std::vector<std::string>& files, F each) {
  std::string line;
  if (files.empty()) {
    while (std::getline(std::cin, line)) each(line, std::string("<stdin>"));
    return;
  }
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw std::runtime_error(f + ": cannot open");
    while (std::getline(in, line)) each(line, f);
  }
}

std::vector<std::string> data_or_default(const std::vector<std::string>& data) {
  if (!data.empty()) return data;
  const std::string corpus = zoo::ensure_default_corpus();
  std::cerr << "using the default corpus " << corpus << "\n";
  return {corpus};
}

}  // namespace

int main(int argc, char** argv) {
  zoo::configure_allocator();  // before the first large allocation
  CLI::App app{"zoo: train, fine-tune and export BERT-, GPT- and T5-style transformers"};
  app.set_version_flag("--version", "zoo " + zoo::version() + " (" + zoo::torch_description() + ")");
  int64_t threads = 0;
  app.add_option("--threads", threads,
                 "intra-op CPU threads (default: ZOO_NUM_THREADS, else the CPUs this process may use)")
      ->check(CLI::PositiveNumber);
  app.require_subcommand(0, 1);

  auto* env = app.add_subcommand("env", "print the versions, devices and thread settings in use");

  auto* info = app.add_subcommand("info", "print a model config's architecture and parameter count");
  std::string info_config;
  std::vector<std::string> info_overrides;
  bool info_show_config = false;
  info->add_option("config", info_config, "config file, or a name in configs/ (e.g. gpt2-small)")
      ->required();
  info->add_option("overrides", info_overrides, "key=value changes to the config");
  info->add_flag("--config", info_show_config, "also print every resolved config field");

  auto* schema = app.add_subcommand("schema", "print every model config key with its default");
  bool schema_run = false;
  schema->add_flag("--run", schema_run, "print the run config keys (zoo train, zoo finetune) instead");

  auto* corpus = app.add_subcommand("corpus", "build the default corpus (plain text of the Python docs)");
  std::string corpus_out;
  corpus->add_option("--out", corpus_out, "where to write it (default: the cache path zoo reads)");

  auto* tokenizer = app.add_subcommand("tokenizer", "train SentencePiece tokenizers, encode and decode");
  tokenizer->require_subcommand(1);
  auto* tok_train = tokenizer->add_subcommand("train", "train a tokenizer with zoo's special tokens");
  zoo::TokenizerTrainOptions train_options;
  std::string tok_out, model_type = "unigram";
  tok_train->add_option("--input", train_options.inputs, "text files or directories (default: the default corpus)");
  tok_train->add_option("--vocab-size", train_options.vocab_size, "vocabulary size")->check(CLI::PositiveNumber);
  tok_train->add_option("--model-type", model_type, "unigram or bpe")->check(CLI::IsMember({"unigram", "bpe"}));
  tok_train->add_option("--out", tok_out, "output prefix: writes PREFIX.model and PREFIX.vocab")->required();
  tok_train->add_option("--seed", train_options.seed, "sampling seed");
  tok_train->add_option("--max-sentences", train_options.max_sentences, "lines sampled for training (0 = all)");
  tok_train->add_flag("--skip-invalid-utf8", train_options.skip_invalid_utf8, "skip invalid lines instead of failing");
  tok_train->add_flag("--verbose", train_options.verbose, "show SentencePiece's training log");
  std::string tok_model;
  std::vector<std::string> tok_files;
  bool as_pieces = false;
  auto* tok_encode = tokenizer->add_subcommand("encode", "text lines to ids (or pieces), one line each");
  tok_encode->add_option("--model", tok_model, "tokenizer model (PREFIX or PREFIX.model)")->required();
  tok_encode->add_flag("--pieces", as_pieces, "print pieces instead of ids");
  tok_encode->add_option("files", tok_files, "input files (default: standard input)");
  auto* tok_decode = tokenizer->add_subcommand("decode", "lines of ids to text");
  tok_decode->add_option("--model", tok_model, "tokenizer model (PREFIX or PREFIX.model)")->required();
  tok_decode->add_option("files", tok_files, "input files (default: standard input)");

  auto* data = app.add_subcommand("data", "turn text into token files for training");
  data->require_subcommand(1);
  auto* prepare = data->add_subcommand("prepare", "tokenize text into OUT/train.tokens and OUT/val.tokens");
  std::vector<std::string> data_inputs;
  std::string data_out;
  zoo::TokenizeOptions tokenize_options;
  prepare->add_option("--tokenizer", tok_model, "tokenizer model (PREFIX or PREFIX.model)")->required();
  prepare->add_option("--data", data_inputs, "text files or directories (default: the default corpus)");
  prepare->add_option("--out", data_out, "output directory")->required();
  prepare->add_option("--val-fraction", tokenize_options.val_fraction, "share of documents for validation");
  prepare->add_option("--seed", tokenize_options.seed, "which documents go to validation");
  prepare->add_flag("--skip-invalid-utf8", tokenize_options.skip_invalid_utf8, "skip invalid lines instead of failing");

  auto commands = zoo::cli::add_training_commands(app);
  for (auto& c : zoo::cli::add_interop_commands(app)) commands.push_back(std::move(c));
  for (auto& c : zoo::cli::add_bench_commands(app)) commands.push_back(std::move(c));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    const int64_t n = zoo::configure_threads(threads);
    if (env->parsed()) {
      std::cout << "zoo " << zoo::version() << "\n"
                << zoo::torch_description() << "\n"
                << "intra-op threads: " << n << " (CPUs available: " << zoo::available_cpus()
                << ")\n"
                << at::get_parallel_info();
      return 0;
    }
    if (info->parsed()) return run_info(info_config, info_overrides, info_show_config);
    if (schema->parsed()) {
      std::cout << (schema_run ? zoo::run_schema_documentation() : zoo::schema_documentation());
      return 0;
    }
    for (const auto& command : commands)
      if (command.app->parsed()) return command.run();
    if (corpus->parsed()) {
      const std::string out = corpus_out.empty() ? zoo::default_corpus_path() : corpus_out;
      const int64_t documents = zoo::build_default_corpus(out);
      std::cout << "wrote " << out << " (" << documents << " documents, "
                << std::filesystem::file_size(out) << " bytes)\n";
      return 0;
    }
    if (tok_train->parsed()) {
      train_options.kind = model_type == "bpe" ? zoo::TokenizerKind::kBpe : zoo::TokenizerKind::kUnigram;
      train_options.inputs = data_or_default(train_options.inputs);
      std::cerr << "training a " << model_type << " tokenizer of " << train_options.vocab_size << " pieces...\n";
      auto t = zoo::Tokenizer::train(train_options, tok_out);
      std::cout << "wrote " << tok_out << ".model and " << tok_out << ".vocab (" << t.vocab_size()
                << " pieces, hash " << t.hash_hex() << ")\n";
      return 0;
    }
    if (tok_encode->parsed()) {
      auto t = zoo::Tokenizer::load(tok_model);
      for_each_line(tok_files, [&](const std::string& line, const std::string& source) {
        if (int64_t bad = zoo::invalid_utf8_offset(line); bad >= 0) {
          throw std::runtime_error(source + ": invalid UTF-8 at byte offset " + std::to_string(bad) + " of a line");
        }
        std::string out;
        if (as_pieces) {
          for (const auto& p : t.encode_pieces(line)) out += (out.empty() ? "" : " ") + p;
        } else {
          for (int64_t id : t.encode(line)) out += (out.empty() ? "" : " ") + std::to_string(id);
        }
        std::cout << out << "\n";
      });
      return 0;
    }
    if (tok_decode->parsed()) {
      auto t = zoo::Tokenizer::load(tok_model);
      int64_t line_number = 0;
      for_each_line(tok_files, [&](const std::string& line, const std::string& source) {
        ++line_number;
        std::vector<int64_t> ids;
        std::istringstream in(line);
        std::string word;
        while (in >> word) {
          char* end = nullptr;
          long long v = std::strtoll(word.c_str(), &end, 10);
          if (*end != '\0') {
            throw std::runtime_error(source + ":" + std::to_string(line_number) + ": '" + word + "' is not a token id");
          }
          ids.push_back(v);
        }
        std::cout << t.decode(ids) << "\n";
      });
      return 0;
    }
    if (prepare->parsed()) {
      auto t = zoo::Tokenizer::load(tok_model);
      auto stats = zoo::tokenize_to_files(data_or_default(data_inputs), t, data_out, tokenize_options);
      std::cout << "wrote " << data_out << "/train.tokens (" << stats.train_documents << " documents, "
                << stats.train_tokens << " tokens) and " << data_out << "/val.tokens ("
                << stats.val_documents << " documents, " << stats.val_tokens << " tokens)\n";
      return 0;
    }
    std::cout << app.help();
    return 0;
  } catch (const zoo::ConfigError& e) {
    std::cerr << "zoo: error: " << e.what() << "\n";
    return 2;
  } catch (const zoo::NonFiniteLoss& e) {
    std::cerr << "zoo: error: " << e.what() << "\n";
    return 3;
  } catch (const c10::Error& e) {
    std::cerr << "zoo: error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "zoo: error: " << e.what() << "\n";
    return 1;
  }
}
