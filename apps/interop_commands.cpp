// zoo import-hf, export-hf, export (TorchScript) and quantize.

#include <filesystem>
#include <iostream>
#include <memory>

#include <torch/torch.h>

#include "apps/commands.h"
#include "core/files.h"
#include "core/outputs.h"
#include "core/strings.h"
#include "interop/hugging_face.h"
#include "interop/peft.h"
#include "interop/torchscript.h"
#include "models/parameter_count.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace zoo::cli {
namespace {

namespace fs = std::filesystem;

struct ImportArgs {
  std::string dir, out, tokenizer, base, dtype = "auto";
  bool overwrite = false;
  QuantizeArgs quantize;
};

struct QuantizeCommandArgs {
  std::string checkpoint, out, dtype = "auto";
  bool overwrite = false;
  QuantizeArgs quantize;
};

struct ExportArgs {
  std::string checkpoint, out, dtype = "auto";
  bool overwrite = false;
  bool adapters_only = false;
};

// How messages name a resolved weights type: its --dtype spelling.
std::string dtype_name(torch::ScalarType dtype) {
  return to_string(dtype == torch::kBFloat16 ? WeightsDtype::kBFloat16 : WeightsDtype::kFloat32);
}

// A PEFT adapter directory onto a zoo checkpoint of its base model: a LoRA checkpoint naming
// that base by path and hash, with the base's tokenizer.
int import_peft_command(const ImportArgs& a, bool replacing) {
  if (a.base.empty()) {
    throw std::runtime_error(a.dir + ": a PEFT adapter directory: name the zoo checkpoint of its base model with --base");
  }
  const std::string base = resolve_checkpoint(a.base);
  Model model = import_peft(a.dir, base);
  const auto tokenizer = stored_tokenizer(base);
  save_checkpoint(a.out, model, nullptr, tokenizer.get(),
                  {{"step", 0}, {"imported_from", fs::absolute(a.dir).string()}, {"format", "peft"}});
  if (replacing) say_replaced(a.out, "the checkpoint");
  const auto& lora = model.lora->config;
  std::cout << "wrote " << a.out << " (LoRA adapters on " << lora.targets.size() << " projections, rank " << lora.rank
            << ", on " << model.lora->base << ")\n";
  return 0;
}

int import_hf_command(const ImportArgs& a) {
  // Checked before any work: a user's file or folder at --out is never replaced.
  const bool replacing = check_output(a.out, OutputKind::kCheckpoint, a.overwrite) == OutputState::kReplace;
  if (is_peft_directory(a.dir)) return import_peft_command(a, replacing);
  if (!a.base.empty()) throw std::runtime_error("--base: only for a PEFT adapter directory, and " + a.dir + " has no adapter_config.json");
  HfImportReport report;
  Model model = import_hf(a.dir, &report);
  // A bf16 model stays bf16 on disk (half the bytes); training loads float32 master weights.
  const auto dtype = resolve_weights_dtype(from_string<WeightsDtype>(a.dtype), report.stored_dtype);
  model.module()->to(dtype);
  quantize_at_load(model, a.quantize, std::cout);
  if (!report.unexpected.empty()) std::cerr << "warning: unused tensors: " << join(report.unexpected, ", ", 20) << "\n";
  if (!report.ignored.empty()) std::cerr << "ignored (tied copies, mask buffers): " << report.ignored.size() << " tensors\n";
  // The directory's own tokenizer comes with the model; --tokenizer replaces it.
  const std::string tokenizer_path = !a.tokenizer.empty() ? a.tokenizer : has_hf_tokenizer(a.dir) ? a.dir : "";
  std::unique_ptr<Tokenizer> tokenizer;
  if (!tokenizer_path.empty()) {
    tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(tokenizer_path));
    if (tokenizer->vocab_size() > model.config.vocab_size) {
      throw std::runtime_error(tokenizer_path + ": the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                               " tokens, more than the model's vocab_size " + std::to_string(model.config.vocab_size));
    }
  }
  save_checkpoint(a.out, model, nullptr, tokenizer.get(),
                  {{"step", 0}, {"imported_from", fs::absolute(a.dir).string()}, {"format", "huggingface"}});
  if (replacing) say_replaced(a.out, "the checkpoint");
  std::cout << "wrote " << a.out << " (" << describe(model.config).substr(0, describe(model.config).find('\n'))
            << ", " << count_parameters(*model.module()) << " parameters in " << dtype_name(dtype) << ")\n";
  if (tokenizer) {
    std::cout << "tokenizer: " << to_string(tokenizer->kind()) << " from " << tokenizer_path << " ("
              << tokenizer->vocab_size() << " tokens)\n";
  } else {
    std::cout << "no tokenizer in " << a.dir << " and no --tokenizer: generate, eval and finetune need one\n";
  }
  return 0;
}

// What an export reads: its output checked first (zoo replaces only its own), then the checkpoint.
struct ExportSource {
  bool replacing;
  std::string dir;
  Checkpoint checkpoint;
};

ExportSource open_export(const ExportArgs& a, OutputKind kind) {
  const bool replacing = check_output(a.out, kind, a.overwrite) == OutputState::kReplace;
  std::string dir = resolve_checkpoint(a.checkpoint);
  Checkpoint checkpoint = load_checkpoint(dir);
  const bool keeps_packed = kind == OutputKind::kTorchScriptFile && !checkpoint.model.lora;
  if (checkpoint.model.quantization && !keeps_packed) {
    // Hugging Face and PEFT exports hold float weights: what the integers stand for
    // (dequantize_weight); so does a TorchScript export with adapters merged into its weights.
    std::cout << "dequantizing the weights of " << dir << " (" << checkpoint.model.quantization->describe() << ")\n";
    checkpoint.model = dequantized_model(checkpoint.model);
  }
  if (checkpoint.model.lora && !a.adapters_only) {
    // Exports are plain models: W + (alpha / rank) B A in every adapted projection.
    const auto& lora = checkpoint.model.lora->config;
    std::cout << "merging the LoRA adapters (rank " << lora.rank << ", alpha " << lora.alpha << ", "
              << join(lora.targets) << ") into the weights of " << checkpoint.model.lora->base << "\n";
    merge_lora(checkpoint.model);
  }
  return {replacing, std::move(dir), std::move(checkpoint)};
}

int export_hf_command(const ExportArgs& a) {
  if (a.adapters_only) {
    auto [replacing, dir, c] = open_export(a, OutputKind::kPeftAdapterDirectory);
    if (!c.model.lora) throw std::runtime_error(dir + ": has no LoRA adapters (--adapters-only is for LoRA runs)");
    export_peft(c.model, a.out);
    if (replacing) say_replaced(a.out, "the adapter export");
    std::cout << "wrote " << a.out << "/adapter_config.json and " << a.out << "/adapter_model.safetensors (PEFT)\n";
    return 0;
  }
  auto [replacing, dir, c] = open_export(a, OutputKind::kHuggingFaceDirectory);
  export_hf(c.model, a.out, c.tokenizer.get(), resolve_weights_dtype(from_string<WeightsDtype>(a.dtype), c.stored_dtype));
  if (replacing) say_replaced(a.out, "the Hugging Face export");
  std::cout << "wrote " << a.out << "/config.json and " << a.out << "/model.safetensors\n";
  return 0;
}

int export_command(const ExportArgs& a) {
  auto [replacing, dir, c] = open_export(a, OutputKind::kTorchScriptFile);
  // bf16: the weights zoo generate --dtype bf16 decodes with, the position tables in float32 as
  // the scripts expect (interop/script/positions.py).
  const auto dtype = resolve_weights_dtype(from_string<WeightsDtype>(a.dtype), c.stored_dtype);
  place_weights(*c.model.module(), torch::kCPU, dtype);  // quantized weights stay packed
  export_torchscript(c.model, a.out, c.tokenizer.get());
  if (replacing) say_replaced(a.out, "the TorchScript export");
  const auto& config = c.model.config;
  const bool generates = config.family != Family::kBert;
  // A quantized weight's parameter is emptied in the module: the config counts it.
  const int64_t parameters = c.model.quantization ? count_parameters(config) : count_parameters(*c.model.module());
  std::cout << "wrote " << a.out << " (" << to_string(config.family) << ", " << parameters << " "
            << dtype_name(dtype) << " parameters"
            << (c.model.quantization ? ", the weights " + c.model.quantization->describe() : "") << "; methods: forward"
            << (config.is_encoder_decoder() ? ", encode, decode" : "") << (generates ? ", generate" : "")
            << (c.tokenizer ? "; its tokenizer inside" : "") << ")\n";
  if (!c.tokenizer) std::cerr << "warning: " << dir << " has no tokenizer; the export carries none\n";
  return 0;
}

// A checkpoint (a LoRA one merged first) with its weights quantized, beside its tokenizer and the
// files describing its labels and run.
int quantize_command(const QuantizeCommandArgs& a) {
  const bool replacing = check_output(a.out, OutputKind::kCheckpoint, a.overwrite) == OutputState::kReplace;
  const std::string dir = resolve_checkpoint(a.checkpoint);
  Checkpoint c = load_checkpoint(dir);
  if (c.model.lora) {
    // QLoRA's adapters merge into the dequantized base, which is quantized again.
    if (c.model.quantization) c.model = dequantized_model(c.model);
    merge_lora(c.model);
  }
  const auto dtype = resolve_weights_dtype(from_string<WeightsDtype>(a.dtype), c.stored_dtype);
  place_weights(*c.model.module(), torch::kCPU, dtype);
  quantize_at_load(c.model, a.quantize, std::cout);
  std::map<std::string, std::string> extra_files;
  for (const char* name : {"labels.json", "run.yaml"}) {
    if (fs::exists(fs::path(dir) / name)) extra_files[name] = read_file((fs::path(dir) / name).string());
  }
  save_checkpoint(a.out, c.model, nullptr, c.tokenizer.get(),
                  {{"step", c.state.value("step", int64_t{0})}, {"quantized_from", fs::absolute(dir).string()}},
                  extra_files);
  if (replacing) say_replaced(a.out, "the checkpoint");
  std::cout << "wrote " << a.out << " (" << to_string(c.model.config.family) << ", "
            << c.model.quantization->describe() << ", the other tensors in " << dtype_name(dtype) << ")\n";
  return 0;
}

}  // namespace

std::vector<Command> add_interop_commands(CLI::App& app) {
  std::vector<Command> commands;
  auto i = std::make_shared<ImportArgs>();
  auto* import_cmd = app.add_subcommand("import-hf", "turn a Hugging Face model directory into a zoo checkpoint");
  import_cmd->add_option("dir", i->dir, "directory with config.json and model.safetensors (or shards)")->required();
  import_cmd->add_option("--out", i->out, "checkpoint directory to write")->required();
  import_cmd->add_option("--base", i->base, "for a PEFT adapter directory (adapter_config.json): the zoo checkpoint of its base model");
  import_cmd->add_option("--tokenizer", i->tokenizer, "the tokenizer to store with it (default: the directory's own): a zoo .model, a tokenizer.json or a Hugging Face directory");
  add_dtype_option(import_cmd, i->dtype, "the weights' type in the checkpoint: auto (default: bf16 when the files store bf16, else fp32), fp32 or bf16");
  add_overwrite_flag(import_cmd, i->overwrite, "a checkpoint");
  add_quantize_options(import_cmd, i->quantize);
  commands.push_back({import_cmd, [i] { return import_hf_command(*i); }});

  auto e = std::make_shared<ExportArgs>();
  auto* export_cmd = app.add_subcommand("export-hf", "write a checkpoint in Hugging Face's layout (config.json + safetensors)");
  export_cmd->add_option("checkpoint", e->checkpoint, "checkpoint or run directory")->required();
  export_cmd->add_option("--out", e->out, "directory to write")->required();
  export_cmd->add_flag("--adapters-only", e->adapters_only,
                       "a LoRA checkpoint's adapters alone, in PEFT's layout (adapter_config.json + adapter_model.safetensors); "
                       "without it they are merged into the weights");
  add_dtype_option(export_cmd, e->dtype, "the tensors' type: auto (default: the checkpoint's), fp32 or bf16");
  add_overwrite_flag(export_cmd, e->overwrite, "an export");
  commands.push_back({export_cmd, [e] { return export_hf_command(*e); }});

  auto t = std::make_shared<ExportArgs>();
  auto* script_cmd = app.add_subcommand(
      "export", "write a TorchScript module (torch::jit::load / torch.jit.load) with generation and the tokenizer inside");
  script_cmd->add_option("checkpoint", t->checkpoint, "checkpoint or run directory")->required();
  script_cmd->add_option("--out", t->out, "file to write (model.pt)")->required();
  add_dtype_option(script_cmd, t->dtype,
                   "weights' type: auto (default: the checkpoint's), fp32 or bf16 (what generate --dtype bf16 runs)");
  add_overwrite_flag(script_cmd, t->overwrite, "an export");
  commands.push_back({script_cmd, [t] { return export_command(*t); }});

  auto q = std::make_shared<QuantizeCommandArgs>();
  auto* quantize_cmd = app.add_subcommand("quantize", "write a checkpoint with int8 or int4 weights");
  quantize_cmd->add_option("checkpoint", q->checkpoint, "checkpoint or run directory")->required();
  add_quantize_options(quantize_cmd, q->quantize, "--to");
  quantize_cmd->get_option("--to")->required();
  quantize_cmd->add_option("--out", q->out, "checkpoint directory to write")->required();
  add_dtype_option(quantize_cmd, q->dtype, "the other tensors' type: auto (default: the checkpoint's), fp32 or bf16");
  add_overwrite_flag(quantize_cmd, q->overwrite, "a checkpoint");
  commands.push_back({quantize_cmd, [q] { return quantize_command(*q); }});
  return commands;
}

}  // namespace zoo::cli
