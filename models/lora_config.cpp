#include "models/lora_config.h"

#include <stdexcept>

namespace zoo {

nlohmann::json LoraConfig::to_json() const {
  return {{"rank", rank}, {"alpha", alpha}, {"dropout", dropout}, {"targets", targets}};
}

LoraConfig LoraConfig::from_json(const nlohmann::json& j, const std::string& where) {
  LoraConfig c;
  try {
    c.rank = j.at("rank").get<int64_t>();
    c.alpha = j.at("alpha").get<double>();
    c.dropout = j.at("dropout").get<double>();
    c.targets = j.at("targets").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(where + ": lora: expected rank, alpha, dropout and targets (" + std::string(e.what()) + ")");
  }
  if (c.rank <= 0) throw std::runtime_error(where + ": lora: rank must be positive, got " + std::to_string(c.rank));
  return c;
}

nlohmann::json LoraState::to_json() const {
  return {{"lora", config.to_json()}, {"base", base}, {"base_hash", base_hash}, {"trained", trained}};
}

LoraState LoraState::parse(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": corrupt (" + std::string(e.what()) + ")");
  }
  LoraState s;
  if (!j.is_object() || !j.contains("lora")) throw std::runtime_error(path + ": missing 'lora'");
  s.config = LoraConfig::from_json(j["lora"], path);
  try {
    s.base = j.at("base").get<std::string>();
    s.base_hash = j.at("base_hash").get<std::string>();
    s.trained = j.value("trained", std::vector<std::string>{});
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": expected base, base_hash and trained (" + std::string(e.what()) + ")");
  }
  return s;
}

}  // namespace zoo
