#pragma once
// SentencePiece, reached through zoo's module libzoo_sentencepiece.so (tokenizers/sentencepiece_shim.cpp),
// which is loaded on first use with dlmopen into a link-map namespace of its own: Debian's
// libsentencepiece bundles a protobuf that clashes with LibTorch's. Only plain types cross.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zoo {

// Where the SentencePiece module (libzoo_sentencepiece.so) was loaded from; loads it first.
// Throws std::runtime_error saying where it looked when it cannot be loaded.
std::string sentencepiece_module_path();

// One loaded SentencePiece model. Copies share the model.
class SentencePieceProcessor {
 public:
  // Throws std::runtime_error "<source>: not a SentencePiece model (...)".
  static SentencePieceProcessor load(const std::string& model_bytes, const std::string& source);

  // Trains on the lines `next_line` returns (1 with a line, 0 at the end, -1 on an error),
  // with SentencePiece's "key=value" arguments. Returns the serialized model; throws with
  // SentencePiece's message on failure (the caller maps it to a clearer one).
  using NextLine = int (*)(void* context, const char** line, size_t* length);
  struct TrainResult {
    bool ok;
    std::string model;    // when ok
    std::string message;  // when not
  };
  static TrainResult train(const std::string& arguments, NextLine next_line, void* context, unsigned seed,
                           bool verbose);

  int64_t size() const;
  std::string piece(int64_t id) const;
  float score(int64_t id) const;
  std::vector<int64_t> encode(const std::string& text) const;
  std::vector<std::string> encode_pieces(const std::string& text) const;
  // Ids must be inside the vocabulary.
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  std::shared_ptr<void> processor_;  // owned by the module
};

}  // namespace zoo
