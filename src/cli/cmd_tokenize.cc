// `hlx tokenize`: run a Hugging Face tokenizer.json from the command line.
//   hlx tokenize -m DIR (-p TEXT | --file F) [--add-special]   -> ids, space-separated, one line
//   hlx tokenize --tokenizer PATH --decode 1,2,3 [--skip-special]          -> text
//   hlx tokenize --tokenizer PATH --jsonl [--add-special]
//       stdin: one JSON string per line; stdout: one JSON id array per line
//   hlx tokenize --tokenizer PATH --jsonl --decode-jsonl [--skip-special] [--stream]
//       stdin: one JSON id array per line; stdout: one JSON string per line (--stream decodes
//       through StreamDecoder one id at a time and prints the concatenation)
// `-m DIR` is accepted instead of --tokenizer and means DIR/tokenizer.json. In JSONL modes a bad
// line prints {"error": "..."} on its output line and the exit code becomes 1.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/int_list.h"
#include "io/file.h"
#include "tokenizer/tokenizer.h"

namespace hlx::cli {
namespace {

using nlohmann::json;

struct TokenizeArgs {
  std::string tokenizer, model_dir, text, file, decode;
  bool has_text = false, jsonl = false, decode_jsonl = false, add_special = false, skip_special = false, stream = false;
};

std::string dump_string(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }

Result<std::string> stream_decode(const std::shared_ptr<const tok::Tokenizer>& t, const std::vector<uint32_t>& ids,
                                  bool skip_special) {
  tok::StreamDecoder dec(t, skip_special);
  std::string out;
  for (uint32_t id : ids) {
    HLX_ASSIGN_OR_RETURN(std::string piece, dec.step(id));
    out += piece;
  }
  HLX_ASSIGN_OR_RETURN(std::string rest, dec.finish());
  return out + rest;
}

int run_jsonl(const TokenizeArgs& a, const std::shared_ptr<const tok::Tokenizer>& t) {
  int rc = 0;
  std::string line;
  std::ios::sync_with_stdio(false);
  auto fail = [&](const std::string& msg) {
    std::cout << json{{"error", msg}}.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    rc = 1;
  };
  while (std::getline(std::cin, line)) {
    json v = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (a.decode_jsonl) {
      std::vector<uint32_t> ids;
      bool ok = v.is_array();
      if (ok)
        for (const json& x : v) {
          if (!x.is_number_unsigned() || x.get<uint64_t>() > 0xFFFFFFFFull) {
            ok = false;
            break;
          }
          ids.push_back(uint32_t(x.get<uint64_t>()));
        }
      if (!ok) {
        fail("line is not a JSON array of token ids");
        continue;
      }
      Result<std::string> text = a.stream ? stream_decode(t, ids, a.skip_special) : t->decode(ids, a.skip_special);
      if (!text.ok()) {
        fail(text.status().to_string());
        continue;
      }
      std::cout << dump_string(*text) << '\n';
    } else {
      if (!v.is_string()) {
        fail("line is not a JSON string");
        continue;
      }
      auto ids = t->encode(v.get_ref<const std::string&>(), a.add_special);
      if (!ids.ok()) {
        fail(ids.status().to_string());
        continue;
      }
      std::cout << json(*ids).dump() << '\n';
    }
  }
  std::cout.flush();
  return rc;
}

CommandRun setup_tokenize(CLI::App& root) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* sub = root.add_subcommand("tokenize", "Encode text to token ids or decode ids to text");
  sub->add_option("--tokenizer", a->tokenizer, "Path of tokenizer.json");
  sub->add_option("-m,--model", a->model_dir, "Checkpoint directory holding tokenizer.json");
  sub->add_option("-p,--text", a->text, "Text to encode");
  sub->add_option("--file", a->file, "Encode the contents of this file");
  sub->add_option("--decode", a->decode, "Comma-separated ids to decode");
  sub->add_flag("--jsonl", a->jsonl, "Batch mode over stdin, one JSON value per line");
  sub->add_flag("--decode-jsonl", a->decode_jsonl, "With --jsonl: lines are id arrays to decode");
  sub->add_flag("--add-special", a->add_special, "Apply the post-processor (e.g. a leading BOS)");
  sub->add_flag("--skip-special", a->skip_special, "Drop special tokens when decoding");
  sub->add_flag("--stream", a->stream, "Decode through the streaming decoder");
  return [a, sub]() -> int {
    a->has_text = sub->count("--text") > 0;
    std::string path = a->tokenizer;
    if (path.empty() && !a->model_dir.empty()) path = a->model_dir + "/tokenizer.json";
    if (path.empty()) return report(make_error(ErrorKind::kInvalidArgument, "tokenize: --tokenizer or -m required"));
    int modes = int(a->has_text) + int(!a->file.empty()) + int(sub->count("--decode") > 0) + int(a->jsonl);
    if (modes != 1)
      return report(
          make_error(ErrorKind::kInvalidArgument, "tokenize: give exactly one of --text, --file, --decode, --jsonl"));
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return report(make_error(ErrorKind::kNotFound, "'", path, "' does not exist"));
    auto t = tok::Tokenizer::load(path);
    if (!t.ok()) return report(t.status());
    if (a->jsonl) return run_jsonl(*a, *t);
    if (sub->count("--decode") > 0) {
      auto ids = parse_token_ids(a->decode, "--decode");
      if (!ids.ok()) return report(ids.status());
      auto text = a->stream ? stream_decode(*t, *ids, a->skip_special) : (*t)->decode(*ids, a->skip_special);
      if (!text.ok()) return report(text.status());
      std::cout << *text << '\n';
      return 0;
    }
    std::string input = a->text;
    if (!a->file.empty()) {
      auto content = read_file(a->file);
      if (!content.ok()) return report(content.status());
      input = std::move(*content);
    }
    auto ids = (*t)->encode(input, a->add_special);
    if (!ids.ok()) return report(ids.status().with_context(a->file.empty() ? "--text" : "--file '" + a->file + "'"));
    for (size_t i = 0; i < ids->size(); ++i) std::cout << (i ? " " : "") << (*ids)[i];
    std::cout << '\n';
    return 0;
  };
}
HLX_REGISTER_COMMAND(setup_tokenize);

}  // namespace
}  // namespace hlx::cli
