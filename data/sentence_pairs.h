#pragma once
// BERT's sentence-pair objectives beside masked LM: none, next-sentence prediction (Devlin et
// al., 2019) or sentence-order prediction (ALBERT, Lan et al., 2020). No LibTorch here: run
// configs name it.

#include <utility>

#include "core/enum_names.h"

namespace zoo {

enum class SentencePairs { kNone, kNextSentence, kSentenceOrder };

ZOO_ENUM_NAMES(SentencePairs, "sentence_pairs",
               {"none", SentencePairs::kNone}, {"nsp", SentencePairs::kNextSentence},
               {"sop", SentencePairs::kSentenceOrder});

}  // namespace zoo
