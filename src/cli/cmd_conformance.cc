// `hlx conformance DIR`: runs the official StableHLO test programs (one module per file, a public
// @main without arguments that ends in check.expect_* custom calls) through parser → verifier →
// runtime, each in a forked child so a crash or hang is classified instead of ending the run.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "cli/command.h"
#include "runtime/program.h"
#include "stablehlo/parser.h"
#include "stablehlo/verifier.h"

namespace hlx::cli {
namespace {

enum class Outcome { kPass, kWrong, kUnsupported, kError };
const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kPass:
      return "pass";
    case Outcome::kWrong:
      return "wrong";
    case Outcome::kUnsupported:
      return "unsupported";
    case Outcome::kError:
      return "error";
  }
  return "?";
}

double element_as_double(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>()[i];
    case DType::kF16:
      return f16_to_f32(t.data<f16>()[i]);
    case DType::kBF16:
      return bf16_to_f32(t.data<bf16>()[i]);
    case DType::kI64:
      return double(t.data<int64_t>()[i]);
    case DType::kI32:
      return t.data<int32_t>()[i];
    case DType::kI16:
      return t.data<int16_t>()[i];
    case DType::kI8:
      return t.data<int8_t>()[i];
    case DType::kU8:
    case DType::kI1:
      return t.data<uint8_t>()[i];
  }
  return 0;
}

// Position of a float's bit pattern on a line where adjacent representable values differ by 1.
int64_t ordered_bits(const Tensor& t, int64_t i) {
  int64_t bits, sign_bit;
  if (t.dtype() == DType::kF32) {
    bits = t.data<uint32_t>()[i];
    sign_bit = int64_t(1) << 31;
  } else {
    bits = t.data<uint16_t>()[i];
    sign_bit = 1 << 15;
  }
  return (bits & sign_bit) ? -(bits & (sign_bit - 1)) : bits;
}

bool same_bits(const Tensor& a, const Tensor& b, int64_t i) {
  size_t n = dtype_size(a.dtype());
  return std::memcmp(static_cast<const char*>(a.raw()) + i * n, static_cast<const char*>(b.raw()) + i * n, n) == 0;
}

// The three checks, as the corpus README defines them.
Status check(const std::string& kind, const std::vector<Tensor>& operands) {
  if (operands.size() != 2) return make_error(ErrorKind::kInvalidArgument, kind, " takes 2 operands");
  const Tensor& a = operands[0];
  const Tensor& b = operands[1];
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return make_error(ErrorKind::kInvalidArgument, kind, ": ", a.type_string(), " vs ", b.type_string());
  bool fp = is_float(a.dtype());
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    double x = element_as_double(a, i), y = element_as_double(b, i);
    bool ok;
    if (!fp) {
      ok = same_bits(a, b, i);
    } else if (std::isnan(x) || std::isnan(y)) {
      ok = std::isnan(x) && std::isnan(y);
    } else if (kind == "check.expect_almost_eq") {
      ok = std::isinf(x) || std::isinf(y) ? x == y : std::fabs(x - y) <= 1e-3;
    } else if (kind == "check.expect_close") {
      ok = std::isinf(x) || std::isinf(y) ? same_bits(a, b, i)
                                          : std::llabs(ordered_bits(a, i) - ordered_bits(b, i)) <= 3;
    } else {
      ok = x == y;
    }
    if (!ok)
      return make_error(ErrorKind::kInvalidArgument, kind, " failed at element ", i, ": got ", x, ", expected ", y);
  }
  return ok_status();
}

struct ProgramResult {
  Outcome outcome = Outcome::kError;
  std::string detail;
};

// Runs one program in this process and reports what happened.
ProgramResult run_program(const std::string& path) {
  // A typed kUnsupported refusal (an element type, op or feature hlx does not implement) at any
  // stage is "unsupported"; anything else that fails before the checks run is an "error".
  auto refused = [](const Status& s) -> ProgramResult {
    return {s.kind() == ErrorKind::kUnsupported ? Outcome::kUnsupported : Outcome::kError, s.to_string()};
  };
  auto module = shlo::parse_module_file(path);
  if (!module.ok()) return refused(module.status());
  if (Status s = shlo::verify_module(*module); !s.ok()) return refused(s);
  std::vector<std::string> failures;
  size_t checks = 0;
  rt::ProgramOptions options;
  for (const char* kind : {"check.expect_eq", "check.expect_close", "check.expect_almost_eq"}) {
    std::string k = kind;
    options.custom_calls.emplace_back(k, [k, &failures, &checks](const std::vector<Tensor>& operands) {
      ++checks;
      if (Status s = check(k, operands); !s.ok()) failures.push_back(s.message());
      return ok_status();
    });
  }
  auto program = rt::Program::compile(std::make_shared<shlo::Module>(std::move(*module)), options);
  if (!program.ok()) return refused(program.status());
  auto outputs = (*program)->run("main", {});
  if (!outputs.ok()) return refused(outputs.status());
  if (checks == 0) return {Outcome::kError, "no check ran"};
  if (!failures.empty()) return {Outcome::kWrong, failures.front()};
  return {Outcome::kPass, ""};
}

// Forks so that a crash or a hang is an "error" outcome for that program only.
ProgramResult run_isolated(const std::string& path, int timeout_s) {
  int fds[2];
  if (pipe(fds) != 0) return {Outcome::kError, "pipe failed"};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(unsigned(timeout_s));
    ProgramResult r = run_program(path);
    std::string msg = std::string(1, char('0' + int(r.outcome))) + r.detail.substr(0, 2000);
    ssize_t unused = write(fds[1], msg.data(), msg.size());
    (void)unused;
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, size_t(n));
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (WIFSIGNALED(wstatus)) {
    int sig = WTERMSIG(wstatus);
    return {Outcome::kError,
            sig == SIGALRM ? str_cat("hang: over ", timeout_s, " s") : str_cat("crash: ", strsignal(sig))};
  }
  if (msg.empty()) return {Outcome::kError, "child exited without a result"};
  return {Outcome(msg[0] - '0'), msg.substr(1)};
}

// The ops a program tests and the element types of their operands (helpers @inputs/@expected hold
// only constants; calls, returns and checks are scaffolding).
void ops_under_test(const shlo::Module& m, std::set<std::string>& ops, std::set<std::string>& types) {
  std::function<void(const shlo::Function&, const std::vector<shlo::Op>&)> walk =
      [&](const shlo::Function& fn, const std::vector<shlo::Op>& body) {
        for (const shlo::Op& op : body) {
          if (op.name == "func.call" || op.name == "func.return" || op.name == "stablehlo.custom_call" ||
              op.name == "stablehlo.return" || (op.name == "stablehlo.constant" && fn.name != "main"))
            continue;
          ops.insert(op.name);
          for (shlo::ValueId v : op.operands) types.insert(std::string(dtype_name(fn.type_of(v).dtype)));
          for (shlo::ValueId v : op.results)
            if (op.operands.empty()) types.insert(std::string(dtype_name(fn.type_of(v).dtype)));
          for (const shlo::Block& b : op.regions) walk(fn, b.ops);
        }
      };
  for (const shlo::Function& fn : m.functions)
    if (fn.name != "inputs" && fn.name != "expected") walk(fn, fn.body);
}

struct Tally {
  std::map<Outcome, int> counts;
  void add(Outcome o) { ++counts[o]; }
};

std::string table(const std::map<std::string, Tally>& rows, const std::string& heading) {
  std::string s =
      str_cat("| ", heading, " | programs | pass | unsupported | wrong | error |\n|---|---:|---:|---:|---:|---:|\n");
  for (const auto& row : rows) {
    const std::string& name = row.first;
    const Tally& t = row.second;
    auto c = [&](Outcome o) {
      auto it = t.counts.find(o);
      return it == t.counts.end() ? 0 : it->second;
    };
    int total = c(Outcome::kPass) + c(Outcome::kUnsupported) + c(Outcome::kWrong) + c(Outcome::kError);
    s += str_cat("| `", name, "` | ", total, " | ", c(Outcome::kPass), " | ", c(Outcome::kUnsupported), " | ",
                 c(Outcome::kWrong), " | ", c(Outcome::kError), " |\n");
  }
  return s;
}

CommandRun setup_conformance(CLI::App& root) {
  struct Options {
    std::string dir, markdown, filter;
    int timeout_s = 60;
    bool verbose = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand("conformance", "Run the official StableHLO test programs in DIR");
  cmd->add_option("dir", opt->dir, "Folder of .mlir test programs")->required();
  cmd->add_option("--markdown", opt->markdown, "Write a Markdown report (docs/CONFORMANCE.md)");
  cmd->add_option("--filter", opt->filter, "Only files whose name contains this text");
  cmd->add_option("--timeout", opt->timeout_s, "Seconds per program before it counts as a hang");
  cmd->add_flag("-v,--verbose", opt->verbose, "Print every program's outcome");
  return [opt] {
    namespace fs = std::filesystem;
    if (!fs::is_directory(opt->dir)) {
      std::cerr << "hlx conformance: " << opt->dir << " is not a directory; skipping\n";
      return 77;  // ctest SKIP_RETURN_CODE
    }
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(opt->dir))
      if (e.path().extension() == ".mlir" && e.path().filename().string().find(opt->filter) != std::string::npos)
        files.push_back(e.path().string());
    std::sort(files.begin(), files.end());

    Tally total;
    std::map<std::string, Tally> by_op, by_type;
    std::vector<std::string> problems;
    auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < files.size(); ++i) {
      ProgramResult r = run_isolated(files[i], opt->timeout_s);
      std::string name = fs::path(files[i]).filename().string();
      total.add(r.outcome);
      if (auto m = shlo::parse_module_file(files[i]); m.ok()) {
        std::set<std::string> ops, types;
        ops_under_test(*m, ops, types);
        for (const auto& op : ops) by_op[op].add(r.outcome);
        for (const auto& t : types) by_type[t].add(r.outcome);
      }
      if (r.outcome == Outcome::kWrong || r.outcome == Outcome::kError)
        problems.push_back(str_cat(outcome_name(r.outcome), ": ", name, ": ", r.detail));
      if (opt->verbose)
        std::cout << outcome_name(r.outcome) << " " << name << (r.detail.empty() ? "" : ": ") << r.detail << "\n";
      if ((i + 1) % 200 == 0) std::cerr << "conformance: " << i + 1 << "/" << files.size() << " programs\n";
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto c = [&](Outcome o) { return total.counts[o]; };
    for (const auto& p : problems) std::cout << p << "\n";
    std::string summary = str_cat(files.size(), " programs: ", c(Outcome::kPass), " pass, ", c(Outcome::kUnsupported),
                                  " unsupported, ", c(Outcome::kWrong), " wrong, ", c(Outcome::kError), " error");
    std::cout << summary << " (" << int(seconds) << " s)\n";
    if (!opt->markdown.empty()) {
      std::ofstream md(opt->markdown);
      md << "# StableHLO conformance\n\n"
         << "Generated by `hlx conformance ../shared/stablehlo-testdata --markdown docs/CONFORMANCE.md` over the\n"
         << "official StableHLO test programs (see `../shared/stablehlo-testdata/README.md`). Each program is\n"
         << "parsed, verified, compiled and run in its own process; its `check.expect_*` calls decide the outcome.\n"
         << "`unsupported` means the runtime refused the program with its typed error before computing anything.\n\n"
         << "**" << summary << ".**\n\n## By op\n\nA program counts under every op it uses besides its scaffolding.\n\n"
         << table(by_op, "op") << "\n## By element type\n\nElement types of the tested ops' operands.\n\n"
         << table(by_type, "type");
      if (!problems.empty()) {
        md << "\n## Wrong or error\n\n";
        for (const auto& p : problems) md << "- " << p << "\n";
      }
    }
    return problems.empty() ? 0 : 1;
  };
}
HLX_REGISTER_COMMAND(setup_conformance);

}  // namespace
}  // namespace hlx::cli
