// Chat templates (see chat_template.h).
#include "data/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include <toml++/toml.h>

#include "data/tokenizer/tokenizer.h"
#include "engine/core/status.h"

namespace zt::data {

namespace {

// The published templates, as their model cards' tokenizer_config.json define them (the Jinja
// is in tests/data/chat_templates.py, rendered there by Jinja2 to check these).
ChatTemplate llama3() {
  // Meta-Llama-3-8B-Instruct: bos_token once, then per message
  // '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>'
  return {"llama3", "<|begin_of_text|>", "<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>", true,
          {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}};
}

ChatTemplate chatml() {
  // ChatML: '<|im_start|>' + role + '\n' + content + '<|im_end|>' + '\n'
  return {"chatml", "", "<|im_start|>{role}\n", "<|im_end|>\n", false, {"<|im_start|>", "<|im_end|>"}};
}

// Python's str.isspace() for one code point (what Jinja's trim strips).
bool python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// The code point starting at s[i] and its length in bytes (a malformed byte: itself, length 1).
std::pair<uint32_t, size_t> code_point(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return uint32_t(uint8_t(s[k])); };
  const uint32_t c = b(i);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
  if (n == 1 || i + n > s.size()) return {c, 1};
  uint32_t v = c & (0xff >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return {c, 1};
    v = (v << 6) | (b(i + k) & 0x3f);
  }
  return {v, n};
}

std::string python_strip(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end) {
    const auto [c, n] = code_point(s, begin);
    if (!python_space(c)) break;
    begin += n;
  }
  while (end > begin) {  // back to the start of the last code point
    size_t start = end - 1;
    while (start > begin && (uint8_t(s[start]) & 0xc0) == 0x80) --start;
    const auto [c, n] = code_point(s, start);
    if (start + n != end || !python_space(c)) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

std::string replace_role(const std::string& prefix, const std::string& role) {
  std::string out = prefix;
  for (size_t at = out.find("{role}"); at != std::string::npos; at = out.find("{role}", at + role.size()))
    out.replace(at, 6, role);
  return out;
}

ChatTemplate from_file(const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    user_error("{}: not a chat template: {} (line {})", path, e.description(), e.source().begin.line);
  }
  ChatTemplate c;
  c.name = std::filesystem::path(path).stem().string();
  const auto text = [&](const char* key, bool required) {
    const toml::node* n = t.get(key);
    if (!n) {
      if (required) user_error("{}: chat template key \"{}\" is missing", path, key);
      return std::string();
    }
    if (!n->is_string()) user_error("{}: chat template key \"{}\" must be a string", path, key);
    return std::string(*n->value<std::string>());
  };
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    if (key != "begin" && key != "message_prefix" && key != "message_suffix" && key != "trim_content" &&
        key != "special_tokens")
      user_error("{}: unknown chat template key \"{}\" (keys: begin, message_prefix, message_suffix, trim_content, "
                 "special_tokens)", path, key);
  }
  c.begin = text("begin", false);
  c.message_prefix = text("message_prefix", true);
  c.message_suffix = text("message_suffix", true);
  if (const toml::node* n = t.get("trim_content")) {
    if (!n->is_boolean()) user_error("{}: chat template key \"trim_content\" must be true or false", path);
    c.trim_content = *n->value<bool>();
  }
  if (const toml::node* n = t.get("special_tokens")) {
    const toml::array* a = n->as_array();
    if (!a) user_error("{}: chat template key \"special_tokens\" must be an array of strings", path);
    for (const toml::node& e : *a) {
      if (!e.is_string() || e.value<std::string>()->empty())
        user_error("{}: chat template key \"special_tokens\" must be an array of non-empty strings", path);
      c.special_tokens.push_back(*e.value<std::string>());
    }
  }
  return c;
}

}  // namespace

std::vector<std::string> ChatTemplate::builtin_names() { return {"llama3", "chatml"}; }

ChatTemplate ChatTemplate::named(const std::string& name_or_file) {
  if (name_or_file == "llama3") return llama3();
  if (name_or_file == "chatml") return chatml();
  if (!std::filesystem::is_regular_file(name_or_file))
    user_error("--template {}: neither a built-in template (llama3, chatml) nor a template file", name_or_file);
  return from_file(name_or_file);
}

RenderedChat render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages, const LossPolicy& loss) {
  RenderedChat r;
  if (!messages.empty()) r.text = t.begin;
  // The end of turn that trains: the suffix's leading special token (ChatML's <|im_end|>, not the
  // newline after it), or the whole suffix when it starts with none.
  size_t end_of_turn = t.message_suffix.size(), longest = 0;
  for (const std::string& s : t.special_tokens)
    if (s.size() > longest && t.message_suffix.rfind(s, 0) == 0) end_of_turn = longest = s.size();
  for (const ChatMessage& m : messages) {
    r.text += replace_role(t.message_prefix, m.role);
    const size_t content = r.text.size();
    r.text += t.trim_content ? python_strip(m.content) : m.content;
    const bool trains = std::find(loss.roles.begin(), loss.roles.end(), m.role) != loss.roles.end();
    const size_t end = r.text.size() + (loss.train_end_of_turn ? end_of_turn : 0);
    r.text += t.message_suffix;
    if (trains && end > content) {
      if (!r.trained.empty() && r.trained.back().second == content) r.trained.back().second = end;
      else r.trained.push_back({content, end});
    }
  }
  return r;
}

std::vector<std::vector<ChatMessage>> parse_conversations(const std::string& jsonl, const std::string& path) {
  std::vector<std::vector<ChatMessage>> out;
  std::istringstream in(jsonl);
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto bad = [&](const std::string& why) {
      user_error("{}:{}: {} (expected {{\"messages\": [{{\"role\": ..., \"content\": ...}}, ...]}} or "
                 "{{\"prompt\": ..., \"completion\": ...}})", path, line_no, why);
    };
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) bad("not a JSON object");
    std::vector<ChatMessage> conv;
    if (j.contains("messages")) {
      const auto& ms = j["messages"];
      if (!ms.is_array()) bad("\"messages\" is not an array");
      for (size_t i = 0; i < ms.size(); ++i) {
        const auto& m = ms[i];
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string())
          bad(fmt::format("message {} needs a string \"role\" and a string \"content\"", i + 1));
        conv.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
    } else if (j.contains("prompt") && j.contains("completion")) {
      if (!j["prompt"].is_string() || !j["completion"].is_string()) bad("\"prompt\" and \"completion\" must be strings");
      conv = {{"user", j["prompt"].get<std::string>()}, {"assistant", j["completion"].get<std::string>()}};
    } else {
      bad("neither \"messages\" nor \"prompt\" and \"completion\"");
    }
    out.push_back(std::move(conv));
  }
  return out;
}

ChatTokens tokenize_chat(const Tokenizer& tok, const RenderedChat& r) {
  ChatTokens out;
  out.tokens = tok.encode_with_special(r.text);
  out.loss.resize(out.tokens.size());
  size_t at = 0, range = 0;  // bytes so far; the first trained range not wholly before them
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    at += tok.decode({out.tokens[i]}).size();
    while (range < r.trained.size() && r.trained[range].second < at) ++range;
    out.loss[i] = range < r.trained.size() && r.trained[range].first < at && at <= r.trained[range].second;
  }
  ZT_CHECK(at == r.text.size(), "the tokens decode to {} bytes of a {}-byte text", at, r.text.size());
  return out;
}

}  // namespace zt::data
