// Chat templates: a conversation (messages with a role and content) rendered to the text a chat
// model is trained on, byte for byte as Hugging Face's apply_chat_template renders the template's
// published Jinja (tests/data/chat_templates.py checks it against Jinja2 itself), with the byte
// ranges whose tokens train (the loss mask of fine-tuning).
//
// Every template ztrain renders has one shape: `begin` once, then per message
//   message_prefix (with {role} replaced) + content (stripped of surrounding whitespace when
//   trim_content) + message_suffix
// Llama 3 and ChatML are built in; a user's template is a TOML file with those keys (and
// `special_tokens`, the markup strings that are single tokens, e.g. "<|im_start|>").
#pragma once
#include <string>
#include <vector>

namespace zt::data {

struct ChatMessage {
  std::string role, content;
};

struct ChatTemplate {
  std::string name;
  std::string begin;           // once, before the first message (a BOS token)
  std::string message_prefix;  // "{role}" is replaced by the message's role
  std::string message_suffix;  // the end of a turn
  bool trim_content = false;   // Jinja's `| trim`: Python's str.strip() of the content
  std::vector<std::string> special_tokens;  // markup strings that are one token each

  // "llama3", "chatml", or a TOML file (UserError naming the key when malformed).
  static ChatTemplate named(const std::string& name_or_file);
  static std::vector<std::string> builtin_names();
};

// Which tokens train: the messages of these roles (content, and their end of turn with
// train_end_of_turn), never the template's other markup.
struct LossPolicy {
  std::vector<std::string> roles = {"assistant"};
  bool train_end_of_turn = true;
};

struct RenderedChat {
  std::string text;
  // Byte ranges [begin, end) of `text` whose tokens carry loss, ascending, disjoint.
  std::vector<std::pair<size_t, size_t>> trained;
};

RenderedChat render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages, const LossPolicy& loss);

class Tokenizer;

// The rendered text as tokens, as Hugging Face tokenizes it: the whole text at once, its special
// tokens (the template's, added to `tok` beforehand) as their ids. loss[i] = 1 when token i, as a
// target, trains: when its last byte lies in a trained range (a token straddling a boundary, as
// "\n " of a newline and an untrimmed content's leading space, belongs to where it ends).
struct ChatTokens {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> loss;
};
ChatTokens tokenize_chat(const Tokenizer& tok, const RenderedChat& r);

// The conversations of a JSONL text, one a line: {"messages": [{"role": R, "content": C}, ...]}, or
// {"prompt": P, "completion": C} (a user turn, then an assistant turn). Blank lines are skipped;
// anything else is a UserError naming `path` and the line.
std::vector<std::vector<ChatMessage>> parse_conversations(const std::string& jsonl, const std::string& path);

}  // namespace zt::data
