#include "tokenizers/post_processors.h"

#include <tuple>

namespace zoo {
namespace {

Encoding special_encoding(const std::vector<int64_t>& ids, int64_t type_id) {
  Encoding e;
  e.ids = ids;
  e.type_ids.assign(ids.size(), type_id);
  e.special_mask.assign(ids.size(), 1);
  return e;
}

// `inner` between optional special tokens (-1: none), every added token of type `type_id`.
Encoding surround(int64_t before, const Encoding& inner, int64_t after, int64_t type_id) {
  Encoding e;
  if (before >= 0) e.append(special_encoding({before}, type_id));
  e.append(inner);
  if (after >= 0) e.append(special_encoding({after}, type_id));
  return e;
}

std::pair<std::string, int64_t> token_and_id(const JsonView& json) {
  const auto pair = json.elements();
  if (pair.size() != 2) json.fail("expected [token, id]");
  return {pair[0].as_string(), pair[1].as_int()};
}

std::vector<PostProcessor::TemplatePiece> read_template(const JsonView& json) {
  std::vector<PostProcessor::TemplatePiece> pieces;
  for (const auto& element : json.elements()) {
    const auto members = element.members();
    if (members.size() != 1) element.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    const auto& [form, body] = members.front();
    PostProcessor::TemplatePiece piece{};
    piece.type_id = body.int_at("type_id");
    if (form == "Sequence") {
      const std::string id = body.string_at("id");
      if (id != "A" && id != "B") body.at("id").fail("expected \"A\" or \"B\", found '" + id + "'");
      piece.is_sequence = true;
      piece.second = id == "B";
    } else if (form == "SpecialToken") {
      piece.is_sequence = false;
      piece.special = body.string_at("id");
    } else {
      element.fail("unsupported template piece '" + form + "' (expected Sequence or SpecialToken)");
    }
    pieces.push_back(piece);
  }
  return pieces;
}

void check_template(const PostProcessor& p, const std::vector<PostProcessor::TemplatePiece>& pieces,
                    const JsonView& json, bool is_pair) {
  const auto elements = json.elements();
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].is_sequence && pieces[i].second && !is_pair) {
      elements[i].fail("the single-sequence template refers to $B");
    }
    if (!pieces[i].is_sequence && p.special_tokens.count(pieces[i].special) == 0) {
      elements[i].fail("special token '" + pieces[i].special + "' is not in special_tokens");
    }
  }
}

PostProcessorKind kind_from_json(const JsonView& type) {
  return enum_from_json<PostProcessorKind>(type);
}

}  // namespace

PostProcessor PostProcessor::from_json(const JsonView& json) {
  PostProcessor p;
  p.kind = kind_from_json(json.at("type"));
  switch (p.kind) {
    case PostProcessorKind::kTemplate: {
      for (const auto& [name, token] : json.at("special_tokens").members()) {
        std::vector<int64_t> ids;
        for (const auto& id : token.at("ids").elements()) ids.push_back(id.as_int());
        if (token.at("tokens").elements().size() != ids.size()) token.fail("ids and tokens differ in length");
        p.special_tokens[name] = ids;
      }
      p.single = read_template(json.at("single"));
      p.pair = read_template(json.at("pair"));
      check_template(p, p.single, json.at("single"), false);
      check_template(p, p.pair, json.at("pair"), true);
      break;
    }
    case PostProcessorKind::kBert:
    case PostProcessorKind::kRoberta: {
      std::tie(p.cls_token, p.cls_id) = token_and_id(json.at("cls"));
      std::tie(p.sep_token, p.sep_id) = token_and_id(json.at("sep"));
      if (p.kind == PostProcessorKind::kRoberta) {
        // Required by tokenizers; both only move offsets.
        json.bool_at("trim_offsets");
        json.bool_at("add_prefix_space");
      }
      break;
    }
    case PostProcessorKind::kByteLevel:
      json.bool_at("add_prefix_space");
      json.bool_at("trim_offsets");
      break;
    case PostProcessorKind::kSequence:
      for (const auto& child : json.at("processors").elements()) p.children.push_back(from_json(child));
      break;
  }
  return p;
}

std::vector<Encoding> PostProcessor::process(std::vector<Encoding> encodings, bool add_special_tokens) const {
  switch (kind) {
    case PostProcessorKind::kByteLevel:
      return encodings;
    case PostProcessorKind::kBert: {
      if (!add_special_tokens) return encodings;
      std::vector<Encoding> out{surround(cls_id, encodings[0], sep_id, 0)};
      if (encodings.size() > 1) out.push_back(surround(-1, encodings[1], sep_id, 1));
      return out;
    }
    case PostProcessorKind::kRoberta: {
      for (auto& e : encodings) e.type_ids.assign(e.size(), 0);
      if (!add_special_tokens) return encodings;
      std::vector<Encoding> out{surround(cls_id, encodings[0], sep_id, 0)};
      if (encodings.size() > 1) out.push_back(surround(sep_id, encodings[1], sep_id, 0));
      return out;
    }
    case PostProcessorKind::kTemplate: {
      std::vector<Encoding> out;
      for (const auto& piece : encodings.size() > 1 ? pair : single) {
        if (piece.is_sequence) {
          Encoding e = encodings[piece.second ? 1 : 0];
          e.type_ids.assign(e.size(), piece.type_id);
          out.push_back(std::move(e));
        } else if (add_special_tokens) {
          out.push_back(special_encoding(special_tokens.at(piece.special), piece.type_id));
        }
      }
      return out;
    }
    case PostProcessorKind::kSequence:
      for (const auto& child : children) encodings = child.process(std::move(encodings), add_special_tokens);
      return encodings;
  }
  return encodings;
}

Encoding post_process(const PostProcessor* processor, Encoding first, const Encoding* second,
                      bool add_special_tokens) {
  std::vector<Encoding> encodings{std::move(first)};
  if (second != nullptr) encodings.push_back(*second);
  for (size_t i = 0; i < encodings.size(); ++i) {
    encodings[i].type_ids.assign(encodings[i].size(), static_cast<int64_t>(i));
    encodings[i].special_mask.assign(encodings[i].size(), 0);
  }
  if (processor != nullptr) encodings = processor->process(std::move(encodings), add_special_tokens);
  Encoding merged;
  for (const auto& e : encodings) merged.append(e);
  return merged;
}

}  // namespace zoo
