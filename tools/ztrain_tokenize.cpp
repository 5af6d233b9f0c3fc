// ztrain-tokenize: encode / decode text with a tiktoken-format BPE or the byte-level tokenizer,
// and turn text or JSONL files into token shards plus a manifest (data/FORMAT.md), or chat
// conversations into fine-tuning shards with a loss mask.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/chat_template.h"
#include "data/shard.h"
#include "data/shard_writer.h"
#include "data/tokenizer/tokenizer.h"
#include "engine/core/byte_size.h"
#include "engine/core/status.h"

using namespace zt;
using namespace zt::data;

namespace {

const char* kUsage = R"(usage:
  ztrain-tokenize encode --vocab VOCAB [--allow-special] [INPUT]
      prints the token ids of INPUT (a file, or stdin when absent or "-"), space-separated
  ztrain-tokenize decode --vocab VOCAB [INPUT]
      reads space-separated ids and writes the decoded bytes to stdout
  ztrain-tokenize bench --vocab VOCAB [--threads N] [--repeats R] INPUT
      times encoding INPUT (best of R, vocabulary load excluded); prints JSON
  ztrain-tokenize shards --vocab VOCAB --out DIR [--shard-tokens N] [--format auto|text|jsonl]
                         [--threads N] INPUT...
      tokenizes documents into DIR/shard_NNNNN.ztok + DIR/manifest.json. A text file is one
      document; a .jsonl file (or --format jsonl) holds one document per line in its "text" field.
      The dataset is built beside DIR and replaces it only when complete: a failure leaves a
      previous dataset in DIR whole. DIR must be new or hold a dataset only.

  ztrain-tokenize chat --vocab VOCAB --template T --out DIR [--train-roles R,...]
                       [--train-end-of-turn true|false] [--max-tokens N] [--overlong drop|truncate]
                       [--shard-tokens N] INPUT.jsonl...
      conversations into fine-tuning shards (data/FORMAT.md version 2: whole documents with a loss
      mask). Each line: {"messages": [{"role": ..., "content": ...}, ...]}, or {"prompt": ...,
      "completion": ...} (a user turn, then an assistant turn). T: llama3, chatml or a template
      file (docs/data.md); its markup tokens absent from VOCAB are added after it. Only the turns
      of the --train-roles (default assistant) carry loss, with their end-of-turn token unless
      --train-end-of-turn false. A conversation over --max-tokens is dropped, or with --overlong
      truncate cut to them (dropped if nothing that trains is left). Prints the counts.
  ztrain-tokenize render --template T [--train-roles R,...] [--train-end-of-turn true|false] INPUT.jsonl
      prints each conversation as T renders it, one JSON line each: {"text": ..., "trained":
      [[begin, end], ...]} (the byte ranges that carry loss)

VOCAB is "byte" (256 byte tokens + <|endoftext|> = 256) or a .tiktoken file with a .meta.json
beside it (split regex and special tokens), e.g. gpt2.tiktoken or cl100k_base.tiktoken. The
ranks are checked as tiktoken checks them: unique, special tokens clear of them, and ranks +
special tokens = the meta's n_vocab when it gives one.
Exit status: 0 ok, 1 runtime failure, 2 bad input.
)";

std::string read_input(const std::string& path) {
  std::stringstream ss;
  if (path.empty() || path == "-") {
    ss << std::cin.rdbuf();
  } else {
    if (std::filesystem::is_directory(path))
      user_error("{}: is a directory (give the text or .jsonl files in it, e.g. {}/*.txt)", path, path);
    std::ifstream f(path, std::ios::binary);
    if (!f) user_error("{}: cannot open input", path);
    ss << f.rdbuf();
  }
  return ss.str();
}

// f(), with `where` (the input file) put before the message of a bad-input error.
template <typename F>
auto in_file(const std::string& where, F&& f) {
  try {
    return f();
  } catch (const UserError& e) {
    throw UserError(fmt::format("{}: {}", where, e.what()));
  }
}

struct Args {
  std::string command, vocab, out, format = "auto";
  std::string chat_template, overlong = "drop";
  LossPolicy loss;
  uint64_t max_tokens = 0;  // 0: no limit
  bool allow_special = false;
  uint64_t shard_tokens = 100'000'000;
  int repeats = 3;
  int threads = 0;
  std::vector<std::string> inputs;
};

std::vector<std::string> split_roles(const std::string& list) {
  std::vector<std::string> roles;
  std::stringstream in(list);
  for (std::string r; std::getline(in, r, ',');)
    if (!r.empty()) roles.push_back(r);
  if (roles.empty()) user_error("--train-roles needs at least one role, e.g. assistant");
  return roles;
}

bool parse_bool(const std::string& v, const std::string& option) {
  if (v == "true") return true;
  if (v == "false") return false;
  user_error("{} must be true or false, got '{}'", option, v);
}

Args parse_args(int argc, char** argv) {
  Args a;
  if (argc < 2) user_error("missing command\n{}", kUsage);
  a.command = argv[1];
  if (a.command != "encode" && a.command != "decode" && a.command != "shards" && a.command != "bench" &&
      a.command != "chat" && a.command != "render")
    user_error("unknown command '{}' (commands: encode, decode, bench, shards, chat, render)\n{}", a.command, kUsage);
  for (int i = 2; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) user_error("{} needs a value", s);
      return argv[++i];
    };
    if (s == "--vocab") a.vocab = value();
    else if (s == "--out") a.out = value();
    else if (s == "--format") a.format = value();
    else if (s == "--allow-special") a.allow_special = true;
    else if (s == "--shard-tokens") a.shard_tokens = uint64_t(parse_count(value(), s));
    else if (s == "--threads") a.threads = int(parse_count(value(), s, 1, 4096));
    else if (s == "--repeats") a.repeats = int(parse_count(value(), s, 1, 1000));
    else if (s == "--template") a.chat_template = value();
    else if (s == "--train-roles") a.loss.roles = split_roles(value());
    else if (s == "--train-end-of-turn") a.loss.train_end_of_turn = parse_bool(value(), s);
    else if (s == "--max-tokens") a.max_tokens = uint64_t(parse_count(value(), s));
    else if (s == "--overlong") a.overlong = value();
    else if (s.size() > 1 && s[0] == '-' && s != "-") user_error("unknown option {}\n{}", s, kUsage);
    else a.inputs.push_back(s);
  }
  if (a.vocab.empty() && a.command != "render")
    user_error("{}: --vocab is required (a .tiktoken file or \"byte\")", a.command);
  if ((a.command == "chat" || a.command == "render") && a.chat_template.empty())
    user_error("{}: --template is required ({} or a template file)", a.command, fmt::join(ChatTemplate::builtin_names(), ", "));
  if (a.overlong != "drop" && a.overlong != "truncate")
    user_error("--overlong must be drop or truncate, got '{}'", a.overlong);
  if (a.threads <= 0) a.threads = omp_get_num_procs();
  return a;
}

int cmd_encode(const Args& a) {
  if (a.inputs.size() > 1) user_error("encode takes one INPUT");
  const Tokenizer tok = Tokenizer::load(a.vocab);
  const std::string name = a.inputs.empty() || a.inputs[0] == "-" ? "stdin" : a.inputs[0];
  const std::string text = read_input(a.inputs.empty() ? "-" : a.inputs[0]);
  const auto ids = in_file(name, [&] {
    return a.allow_special ? tok.encode_with_special(text, a.threads) : tok.encode_ordinary(text, a.threads);
  });
  std::string out;
  out.reserve(ids.size() * 6);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int cmd_decode(const Args& a) {
  if (a.inputs.size() > 1) user_error("decode takes one INPUT");
  const Tokenizer tok = Tokenizer::load(a.vocab);
  std::istringstream in(read_input(a.inputs.empty() ? "-" : a.inputs[0]));
  std::vector<uint32_t> ids;
  std::string word;
  while (in >> word) {
    const bool digits = !word.empty() && word.size() <= 10 &&
                        word.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoull(word) > UINT32_MAX) user_error("decode: '{}' is not a token id", word);
    ids.push_back(uint32_t(std::stoull(word)));
  }
  const std::string bytes = tok.decode(ids);
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  return 0;
}

int cmd_bench(const Args& a) {
  if (a.inputs.size() != 1) user_error("bench takes one INPUT");
  const Tokenizer tok = Tokenizer::load(a.vocab);
  const std::string text = read_input(a.inputs[0]);
  double best = 1e30;
  size_t n = 0;
  for (int r = 0; r < a.repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    n = tok.encode_ordinary(text, a.threads).size();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("{\"tokens\": %zu, \"bytes\": %zu, \"seconds\": %.6f, \"threads\": %d}\n", n,
              text.size(), best, a.threads);
  return 0;
}

// Documents of one input file: the whole file, or the "text" field of each JSONL line.
std::vector<std::string> read_documents(const std::string& path, const std::string& format) {
  const std::string text = read_input(path);
  const bool jsonl = format == "jsonl" || (format == "auto" && path.size() > 6 &&
                                           path.compare(path.size() - 6, 6, ".jsonl") == 0);
  if (!jsonl) return {text};
  std::vector<std::string> docs;
  std::istringstream in(text);
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string())
      user_error("{}:{}: expected a JSON object with a string \"text\" field", path, line_no);
    docs.push_back(j["text"].get<std::string>());
  }
  return docs;
}

int cmd_shards(const Args& a) {
  if (a.out.empty()) user_error("shards: --out DIR is required");
  if (a.inputs.empty()) user_error("shards: no INPUT files");
  if (a.format != "auto" && a.format != "text" && a.format != "jsonl")
    user_error("--format must be auto, text or jsonl, got '{}'", a.format);
  const Tokenizer tok = Tokenizer::load(a.vocab);
  TokenizerInfo info{tok.kind(), tok.name(), tok.n_vocab(), tok.eot(), tok.vocab_file(), {}};
  ShardWriter writer(a.out, info, a.shard_tokens);
  for (const auto& path : a.inputs) {
    const std::vector<std::string> docs = read_documents(path, a.format);
    // Many documents: one per thread. Few: each document's pieces are split over the threads.
    std::vector<std::vector<uint32_t>> encoded(docs.size());
    if (docs.size() >= size_t(a.threads)) {
      std::string error;  // the first bad document's; thrown after the loop (never out of a thread)
#pragma omp parallel for schedule(dynamic, 16) num_threads(a.threads)
      for (size_t i = 0; i < docs.size(); ++i) {
        try {
          encoded[i] = tok.encode_ordinary(docs[i], 1);
        } catch (const UserError& e) {
#pragma omp critical
          if (error.empty()) error = fmt::format("{}: document {}: {}", path, i + 1, e.what());
        }
      }
      if (!error.empty()) throw UserError(error);
    } else {
      for (size_t i = 0; i < docs.size(); ++i)
        encoded[i] = in_file(docs.size() == 1 ? path : fmt::format("{}: document {}", path, i + 1),
                             [&] { return tok.encode_ordinary(docs[i], a.threads); });
    }
    for (const auto& d : encoded) writer.add_document(d);
  }
  const Manifest m = writer.finish();
  std::fprintf(stderr, "ztrain-tokenize: wrote %zu shard(s), %llu tokens, %llu documents to %s\n",
               m.shards.size(), (unsigned long long)m.total_tokens(),
               (unsigned long long)m.total_documents(), a.out.c_str());
  return 0;
}

int cmd_render(const Args& a) {
  if (a.inputs.size() != 1) user_error("render takes one INPUT.jsonl");
  const ChatTemplate t = ChatTemplate::named(a.chat_template);
  for (const auto& conv : parse_conversations(read_input(a.inputs[0]), a.inputs[0])) {
    const RenderedChat r = render_chat(t, conv, a.loss);
    nlohmann::json j = {{"text", r.text}, {"trained", r.trained}};
    // ASCII lines (a line separator in a content, U+2028, must not split one); invalid UTF-8 in
    // a content shows as U+FFFD
    const std::string line = j.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  return 0;
}

int cmd_chat(const Args& a) {
  if (a.out.empty()) user_error("chat: --out DIR is required");
  if (a.inputs.empty()) user_error("chat: no INPUT.jsonl files");
  const ChatTemplate t = ChatTemplate::named(a.chat_template);
  Tokenizer tok = Tokenizer::load(a.vocab);
  for (const std::string& s : t.special_tokens) tok.add_special(s);
  TokenizerInfo info{tok.kind(), tok.name(), tok.n_vocab(), tok.eot(), tok.vocab_file(), tok.added_specials()};
  ShardWriter writer(a.out, info, a.shard_tokens, kShardVersionDocuments);
  uint64_t kept = 0, truncated = 0, dropped_long = 0, dropped_untrained = 0, trained_tokens = 0;
  for (const auto& path : a.inputs) {
    const auto convs = parse_conversations(read_input(path), path);
    std::vector<ChatTokens> encoded(convs.size());
    std::string error, failure;  // the first bad conversation's; thrown after the loop (never out of a thread)
#pragma omp parallel for schedule(dynamic, 16) num_threads(a.threads)
    for (size_t i = 0; i < convs.size(); ++i) {
      try {
        encoded[i] = tokenize_chat(tok, render_chat(t, convs[i], a.loss));
      } catch (const UserError& e) {
#pragma omp critical
        if (error.empty()) error = fmt::format("{}: conversation {}: {}", path, i + 1, e.what());
      } catch (const std::exception& e) {
#pragma omp critical
        if (failure.empty()) failure = fmt::format("{}: conversation {}: {}", path, i + 1, e.what());
      }
    }
    if (!error.empty()) throw UserError(error);
    if (!failure.empty()) throw RuntimeFailure(failure);
    for (ChatTokens& c : encoded) {
      if (a.max_tokens > 0 && c.tokens.size() > a.max_tokens) {
        if (a.overlong == "drop") {
          ++dropped_long;
          continue;
        }
        c.tokens.resize(a.max_tokens);
        c.loss.resize(a.max_tokens);
        ++truncated;
      }
      const uint64_t trains = uint64_t(std::count(c.loss.begin(), c.loss.end(), uint8_t(1)));
      if (trains == 0) {  // nothing to learn from: no role of --train-roles (left)
        ++dropped_untrained;
        continue;
      }
      trained_tokens += trains;
      writer.add_document(c.tokens, c.loss);
      ++kept;
    }
  }
  if (kept == 0)
    user_error("chat: no conversation left to write ({} over --max-tokens dropped, {} with no turn of {} to train on)",
               dropped_long, dropped_untrained, fmt::join(a.loss.roles, ", "));
  const Manifest m = writer.finish();
  std::fprintf(stderr,
               "ztrain-tokenize: %llu conversations kept (%llu of them truncated), %llu dropped over --max-tokens, "
               "%llu dropped with nothing to train on; %zu shard(s), %llu tokens, %llu with loss, template %s, "
               "vocabulary %u to %s\n",
               (unsigned long long)kept, (unsigned long long)truncated, (unsigned long long)dropped_long,
               (unsigned long long)dropped_untrained, m.shards.size(), (unsigned long long)m.total_tokens(),
               (unsigned long long)trained_tokens, t.name.c_str(), tok.n_vocab(), a.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
                      std::string(argv[1]) == "help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    for (int i = 2; i < argc; ++i)
      if (std::string(argv[i]) == "--help") {
        std::fputs(kUsage, stdout);
        return 0;
      }
    const Args a = parse_args(argc, argv);
    if (a.command == "encode") return cmd_encode(a);
    if (a.command == "decode") return cmd_decode(a);
    if (a.command == "shards") return cmd_shards(a);
    if (a.command == "bench") return cmd_bench(a);
    if (a.command == "chat") return cmd_chat(a);
    if (a.command == "render") return cmd_render(a);
    user_error("unknown command '{}'\n{}", a.command, kUsage);
  } catch (const UserError& e) {
    std::fprintf(stderr, "ztrain-tokenize: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ztrain-tokenize: failure: %s\n", e.what());
    return 1;
  }
}
