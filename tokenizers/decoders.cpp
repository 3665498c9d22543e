#include "tokenizers/decoders.h"

#include "core/unicode.h"
#include "tokenizers/byte_level.h"
#include "tokenizers/normalizers.h"

namespace zoo {
namespace {

// Rust's str::replace: non-overlapping matches from the left; an empty pattern matches at
// every character boundary ("ab" -> "-a-b-").
void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) {
    std::string out = to;
    for (size_t i = 0; i < s.size();) {
      const size_t n = unicode::decode_at(s, i).length;
      out.append(s, i, n);
      out += to;
      i += n;
    }
    s = std::move(out);
    return;
  }
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

// The byte of a "<0xHH>" token, parsed as Rust's u8::from_str_radix(&token[3..5], 16) would.
int byte_fallback_value(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (token[3] == '+') return hex(token[4]);  // from_str_radix accepts a leading '+'
  const int high = hex(token[3]), low = hex(token[4]);
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

std::vector<std::string> decode_byte_level(const std::vector<std::string>& tokens) {
  std::string bytes;
  for (const auto& token : tokens) {
    std::string token_bytes;
    bool all_in_alphabet = true;
    for (size_t i = 0; i < token.size() && all_in_alphabet;) {
      const auto [c, n] = unicode::decode_at(token, i);
      const auto b = byte_level_byte(c);
      if (b) token_bytes += static_cast<char>(*b);
      else all_in_alphabet = false;
      i += n;
    }
    bytes += all_in_alphabet ? token_bytes : token;
  }
  return {unicode::utf8_lossy(bytes)};
}

std::vector<std::string> decode_byte_fallback(const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string pending;
  const auto flush = [&] {
    if (pending.empty()) return;
    if (invalid_utf8_offset(pending) < 0) {
      out.push_back(pending);
    } else {
      for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
    }
    pending.clear();
  };
  for (const auto& token : tokens) {
    const int b = byte_fallback_value(token);
    if (b >= 0) {
      pending += static_cast<char>(b);
      continue;
    }
    flush();
    out.push_back(token);
  }
  flush();
  return out;
}

std::string strip_token(const Decoder& d, const std::string& token) {
  std::vector<std::pair<size_t, size_t>> chars;  // (offset, length)
  for (size_t i = 0; i < token.size();) {
    const size_t n = unicode::decode_at(token, i).length;
    chars.emplace_back(i, n);
    i += n;
  }
  const auto is_strip = [&](size_t k) { return unicode::decode_at(token, chars[k].first).code_point == d.strip_char; };
  size_t start_cut = 0;
  while (start_cut < d.strip_start && start_cut < chars.size() && is_strip(start_cut)) ++start_cut;
  size_t stop_cut = chars.size();
  for (size_t i = 0; i < d.strip_stop && stop_cut > start_cut && is_strip(stop_cut - 1); ++i) --stop_cut;
  if (start_cut >= stop_cut) return "";
  const size_t begin = chars[start_cut].first;
  const size_t end = chars[stop_cut - 1].first + chars[stop_cut - 1].second;
  return token.substr(begin, end - begin);
}

std::vector<std::string> decode_metaspace(const Decoder& d, const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string text;
    for (size_t k = 0; k < tokens[i].size();) {
      const auto [c, n] = unicode::decode_at(tokens[i], k);
      if (c != d.replacement) text.append(tokens[i], k, n);
      else if (i != 0 || d.prepend_scheme == PrependScheme::kNever) text += ' ';
      k += n;
    }
    out.push_back(std::move(text));
  }
  return out;
}

DecoderKind kind_from_json(const JsonView& type) {
  return enum_from_json<DecoderKind>(type);
}

size_t count_at(const JsonView& json, const std::string& key) {
  const int64_t n = json.int_at(key);
  if (n < 0) json.at(key).fail("must not be negative");
  return static_cast<size_t>(n);
}

}  // namespace

std::string wordpiece_cleanup(std::string text) {
  static const std::pair<const char*, const char*> kReplacements[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kReplacements) replace_all(text, from, to);
  return text;
}

Decoder Decoder::from_json(const JsonView& json) {
  Decoder d;
  d.kind = kind_from_json(json.at("type"));
  switch (d.kind) {
    case DecoderKind::kByteLevel:
      json.bool_at("add_prefix_space");  // required by tokenizers; no effect on decoding
      json.bool_at("trim_offsets");
      break;
    case DecoderKind::kWordPiece:
      d.affix = json.string_at("prefix");
      d.cleanup = json.bool_at("cleanup");
      break;
    case DecoderKind::kMetaspace: {
      // The pre-tokenizer's reading, so the two cannot disagree on a file.
      const PreTokenizer p = PreTokenizer::from_json(json);
      d.replacement = p.replacement;
      d.prepend_scheme = p.prepend_scheme;
      break;
    }
    case DecoderKind::kByteFallback:
    case DecoderKind::kFuse:
      break;
    case DecoderKind::kStrip:
      d.strip_char = json.at("content").as_char();
      d.strip_start = count_at(json, "start");
      d.strip_stop = count_at(json, "stop");
      break;
    case DecoderKind::kReplace:
      d.pattern = read_pattern(json.at("pattern"));
      d.content = json.string_at("content");
      break;
    case DecoderKind::kBpe:
      d.affix = json.string_at("suffix");
      break;
    case DecoderKind::kSequence:
      for (const auto& child : json.at("decoders").elements()) d.children.push_back(from_json(child));
      break;
  }
  return d;
}

std::vector<std::string> Decoder::decode_chain(std::vector<std::string> tokens) const {
  switch (kind) {
    case DecoderKind::kByteLevel:
      return decode_byte_level(tokens);
    case DecoderKind::kWordPiece:
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (i != 0) {
          if (tokens[i].compare(0, affix.size(), affix) == 0) tokens[i].erase(0, affix.size());
          else tokens[i].insert(0, 1, ' ');
        }
        if (cleanup) tokens[i] = wordpiece_cleanup(std::move(tokens[i]));
      }
      return tokens;
    case DecoderKind::kMetaspace:
      return decode_metaspace(*this, tokens);
    case DecoderKind::kByteFallback:
      return decode_byte_fallback(tokens);
    case DecoderKind::kFuse: {
      std::string all;
      for (const auto& t : tokens) all += t;
      return {all};
    }
    case DecoderKind::kStrip:
      for (auto& t : tokens) t = strip_token(*this, t);
      return tokens;
    case DecoderKind::kReplace:
      for (auto& t : tokens) {
        std::string out;
        for (const auto& span : pattern->spans(t)) {
          if (span.is_match) out += content;
          else out.append(t, span.begin, span.end - span.begin);
        }
        t = std::move(out);
      }
      return tokens;
    case DecoderKind::kBpe:
      for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], affix, i + 1 == tokens.size() ? "" : " ");
      return tokens;
    case DecoderKind::kSequence:
      for (const auto& child : children) tokens = child.decode_chain(std::move(tokens));
      return tokens;
  }
  return tokens;
}

std::string decode_tokens(const Decoder* decoder, std::vector<std::string> tokens) {
  std::string out;
  if (decoder == nullptr) {
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const auto& t : decoder->decode_chain(std::move(tokens))) out += t;
  return out;
}

}  // namespace zoo
