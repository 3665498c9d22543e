#include "train/trainer_state.h"

#include <stdexcept>

namespace zoo {
namespace {

using json = nlohmann::json;

int64_t integer(const json& j, const char* key, const std::string& source, int64_t min, bool required = true,
                int64_t fallback = 0) {
  if (!j.contains(key)) {
    if (!required) return fallback;
    throw std::runtime_error(source + ": missing key '" + key + "'");
  }
  const auto& v = j.at(key);
  if (!v.is_number_integer()) throw std::runtime_error(source + ": " + key + " must be an integer, got " + v.dump());
  const int64_t n = v.get<int64_t>();
  if (n < min) {
    throw std::runtime_error(source + ": " + key + " (" + std::to_string(n) + ") must be >= " + std::to_string(min));
  }
  return n;
}

double number(const json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) return NAN;
  const auto& v = j.at(key);
  if (!v.is_number()) throw std::runtime_error(source + ": " + key + " must be a number, got " + v.dump());
  return v.get<double>();
}

}  // namespace

json to_json(const EvalResult& r) {
  json j = {{"step", r.step}, {"split", "val"}, {"targets", r.targets}};
  for (const auto& [key, value] : {std::pair<const char*, double>{"loss", r.loss},
                                   {"perplexity", r.perplexity},
                                   {"accuracy", r.accuracy},
                                   {"exact_match", r.exact_match}}) {
    if (!std::isnan(value)) j[key] = value;
  }
  return j;
}

EvalResult eval_result_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw std::runtime_error(where + ": expected an object, got " + j.dump());
  EvalResult r;
  r.step = integer(j, "step", where, 0);
  r.loss = number(j, "loss", where);
  r.perplexity = number(j, "perplexity", where);
  r.accuracy = number(j, "accuracy", where);
  r.exact_match = number(j, "exact_match", where);
  r.targets = integer(j, "targets", where, 0, /*required=*/false);
  return r;
}

json TrainerState::to_json() const {
  return {{"step", step},
          {"world_size", world_size},
          {"context_parallel", context_parallel},
          {"sampler", {{"epoch", sampler_epoch}, {"index", sampler_index}}},
          {"rng", rng},
          {"skipped", skipped},
          {"tokens_seen", tokens_seen},
          {"loss_scale", loss_scale},
          {"objective", objective},
          {"best", best ? zoo::to_json(*best) : json()}};
}

TrainerState TrainerState::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw std::runtime_error(source + ": expected a JSON object of trainer state");
  TrainerState s;
  s.step = integer(j, "step", source, 0);
  s.world_size = integer(j, "world_size", source, 1, /*required=*/false, 1);
  s.context_parallel = integer(j, "context_parallel", source, 1, /*required=*/false, 1);
  if (!j.contains("sampler") || !j.at("sampler").is_object()) {
    throw std::runtime_error(source + ": missing key 'sampler' (the data position)");
  }
  s.sampler_epoch = integer(j.at("sampler"), "epoch", source + ": sampler", 0);
  s.sampler_index = integer(j.at("sampler"), "index", source + ": sampler", 0);
  if (!j.contains("rng") || !j.at("rng").is_string() || j.at("rng").get<std::string>().empty()) {
    throw std::runtime_error(source + ": rng must be the random generator's state as a hex string");
  }
  s.rng = j.at("rng").get<std::string>();
  if (s.rng.size() % 2 != 0 || s.rng.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw std::runtime_error(source + ": rng is not a hex string");
  }
  s.skipped = integer(j, "skipped", source, 0, /*required=*/false);
  s.tokens_seen = integer(j, "tokens_seen", source, 0, /*required=*/false);
  if (j.contains("loss_scale")) {
    s.loss_scale = number(j, "loss_scale", source);
    if (!(s.loss_scale > 0) || !std::isfinite(s.loss_scale)) {
      throw std::runtime_error(source + ": loss_scale must be a positive number, got " + j.at("loss_scale").dump());
    }
  }
  if (j.contains("objective")) {
    if (!j.at("objective").is_string()) throw std::runtime_error(source + ": objective must be a string");
    s.objective = j.at("objective").get<std::string>();
  }
  if (j.contains("best") && !j.at("best").is_null()) {
    s.best = eval_result_from_json(j.at("best"), source + ": best");
    if (s.best->step > s.step) {
      throw std::runtime_error(source + ": best.step (" + std::to_string(s.best->step) + ") is after step (" +
                               std::to_string(s.step) + ")");
    }
  }
  return s;
}

TrainerState TrainerState::parse(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw std::runtime_error(source + ": corrupt (not JSON: " + std::string(e.what()) + ")");
  }
  return from_json(j, source);
}

}  // namespace zoo
