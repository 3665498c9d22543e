// A C interface over SentencePiece, built as its own shared module and loaded by zoo with
// dlmopen into a link-map namespace of its own.
//
// Why: Debian's libsentencepiece carries its own copy of protobuf-lite (3.14) and exports its
// symbols, while LibTorch brings the system libprotobuf (3.21). Linked into one program the
// two interpose each other and the process crashes while starting. RTLD_DEEPBIND is not
// enough either: the module then writes to an uninitialised std::cerr (the program's is a copy
// relocation). In its own namespace SentencePiece gets its own libstdc++ and protobuf, and only
// this C interface (plain types, buffers freed by zoo_spm_free_buffer) crosses over. This file
// must not include LibTorch.

#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#define ZOO_SPM_API extern "C" __attribute__((visibility("default")))

namespace {

char* copy_out(const std::string& s, size_t* length = nullptr) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  if (length != nullptr) *length = s.size();
  return out;
}

int fail(const sentencepiece::util::Status& status, char** error) {
  if (error != nullptr) *error = copy_out(status.ToString());
  return 0;
}

using NextLine = int (*)(void* context, const char** line, size_t* length);

class CallbackIterator : public sentencepiece::SentenceIterator {
 public:
  CallbackIterator(NextLine next, void* context) : next_(next), context_(context) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    const char* line = nullptr;
    size_t length = 0;
    const int r = next_(context_, &line, &length);
    if (r == 1) {
      value_.assign(line, length);
    } else {
      done_ = true;
      if (r < 0) {
        status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInvalidArgument,
                                              "input rejected");
      }
    }
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return status_; }

 private:
  NextLine next_;
  void* context_;
  std::string value_;
  bool done_ = false;
  sentencepiece::util::Status status_;
};

}  // namespace

namespace sentencepiece::logging {
void SetMinLogLevel(int v);  // exported by libsentencepiece, not in its public headers
}

// 0 logs everything (the trainer's progress), 1 warnings and errors only.
ZOO_SPM_API void zoo_spm_set_log_level(int level) { sentencepiece::logging::SetMinLogLevel(level); }

ZOO_SPM_API void zoo_spm_free_buffer(void* p) { std::free(p); }

ZOO_SPM_API void* zoo_spm_load(const char* bytes, size_t length, char** error) {
  auto* p = new sentencepiece::SentencePieceProcessor();
  auto status = p->LoadFromSerializedProto(std::string(bytes, length));
  if (!status.ok()) {
    fail(status, error);
    delete p;
    return nullptr;
  }
  return p;
}

ZOO_SPM_API void zoo_spm_free(void* processor) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(processor);
}

ZOO_SPM_API int zoo_spm_vocab_size(void* processor) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(processor)->GetPieceSize();
}

// The piece of `id`, copied out (free with zoo_spm_free_buffer).
ZOO_SPM_API char* zoo_spm_piece(void* processor, int id) {
  return copy_out(static_cast<sentencepiece::SentencePieceProcessor*>(processor)->IdToPiece(id));
}

ZOO_SPM_API float zoo_spm_score(void* processor, int id) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(processor)->GetScore(id);
}

ZOO_SPM_API int zoo_spm_encode_ids(void* processor, const char* text, size_t length, int** ids,
                                   size_t* count, char** error) {
  std::vector<int> out;
  auto status = static_cast<sentencepiece::SentencePieceProcessor*>(processor)->Encode(
      std::string(text, length), &out);
  if (!status.ok()) return fail(status, error);
  *ids = static_cast<int*>(std::malloc(sizeof(int) * (out.size() + 1)));
  std::memcpy(*ids, out.data(), sizeof(int) * out.size());
  *count = out.size();
  return 1;
}

// Pieces joined with '\n' (pieces never contain a newline).
ZOO_SPM_API int zoo_spm_encode_pieces(void* processor, const char* text, size_t length,
                                      char** pieces, size_t* pieces_length, char** error) {
  std::vector<std::string> out;
  auto status = static_cast<sentencepiece::SentencePieceProcessor*>(processor)->Encode(
      std::string(text, length), &out);
  if (!status.ok()) return fail(status, error);
  std::string joined;
  for (size_t i = 0; i < out.size(); ++i) joined += (i ? "\n" : "") + out[i];
  *pieces = copy_out(joined, pieces_length);
  return 1;
}

ZOO_SPM_API int zoo_spm_decode(void* processor, const int* ids, size_t count, char** text,
                               size_t* length, char** error) {
  std::string out;
  auto status = static_cast<sentencepiece::SentencePieceProcessor*>(processor)->Decode(
      std::vector<int>(ids, ids + count), &out);
  if (!status.ok()) return fail(status, error);
  *text = copy_out(out, length);
  return 1;
}

// Trains with `args` ("key=value" lines) on the lines `next` returns; the serialized model
// comes back in `model`.
ZOO_SPM_API int zoo_spm_train(const char* args, NextLine next, void* context, unsigned seed,
                              char** model, size_t* model_length, char** error) {
  std::unordered_map<std::string, std::string> kwargs;
  std::string all(args);
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\n', start);
    if (end == std::string::npos) end = all.size();
    const std::string line = all.substr(start, end - start);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) kwargs[line.substr(0, eq)] = line.substr(eq + 1);
    start = end + 1;
  }
  sentencepiece::SetRandomGeneratorSeed(seed);
  CallbackIterator lines(next, context);
  std::string serialized;
  auto status = sentencepiece::SentencePieceTrainer::Train(kwargs, &lines, &serialized);
  if (!status.ok()) return fail(status, error);
  *model = copy_out(serialized, model_length);
  return 1;
}
