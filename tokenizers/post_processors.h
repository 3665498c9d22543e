#pragma once
// Hugging Face post-processors (tokenizers/src/processors/): add the special tokens a model
// expects around one sequence or a pair, and set token type ids. Read from tokenizer.json's
// "post_processor"; a type zoo does not implement is refused naming its JSON path.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/enum_names.h"
#include "core/json_view.h"
#include "tokenizers/encoding.h"

namespace zoo {

enum class PostProcessorKind {
  kTemplate,   // a template per single/pair input: "[CLS]:0 $A:0 [SEP]:0" and the like
  kBert,       // [CLS] A [SEP] (B [SEP]); type ids 0 for A's part, 1 for B's
  kRoberta,    // <s> A </s> (</s> B </s>); every type id 0
  kByteLevel,  // leaves ids alone (it trims offsets, which zoo does not report)
  kSequence,   // children in order
};
ZOO_ENUM_NAMES(PostProcessorKind, "post-processor",
               {"TemplateProcessing", PostProcessorKind::kTemplate}, {"BertProcessing", PostProcessorKind::kBert},
               {"RobertaProcessing", PostProcessorKind::kRoberta}, {"ByteLevel", PostProcessorKind::kByteLevel},
               {"Sequence", PostProcessorKind::kSequence});

struct PostProcessor {
  PostProcessorKind kind = PostProcessorKind::kSequence;

  // kBert, kRoberta: (token, id) pairs.
  std::string cls_token, sep_token;
  int64_t cls_id = 0, sep_id = 0;
  // kTemplate: each piece is a sequence ($A or $B) or a special token, with a type id.
  struct TemplatePiece {
    bool is_sequence;
    bool second;          // sequence B (or A when false)
    std::string special;  // the special token's name in `special_tokens`
    int64_t type_id;
  };
  std::vector<TemplatePiece> single, pair;
  // Name -> the ids it stands for (usually one).
  std::map<std::string, std::vector<int64_t>> special_tokens;
  // kSequence
  std::vector<PostProcessor> children;

  static PostProcessor from_json(const JsonView& json);

  // Processes the encodings of one or two sequences (each with type ids 0 and 1 already set)
  // and returns them as the processor leaves them, to be concatenated.
  std::vector<Encoding> process(std::vector<Encoding> encodings, bool add_special_tokens) const;

};

// tokenizers' PostProcessor::process: sets type ids 0 and 1, runs `processor` (or, without one,
// just concatenates), and merges the result.
Encoding post_process(const PostProcessor* processor, Encoding first, const Encoding* second,
                      bool add_special_tokens);

}  // namespace zoo
