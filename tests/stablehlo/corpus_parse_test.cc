// Every program of the official StableHLO test corpus parses, prints, re-parses and re-prints to
// the same bytes; and because the corpus itself is stablehlo-opt output, our print of it equals
// the file (minus its `// RUN:` comment lines), which checks that we print what stablehlo-opt prints.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "stablehlo/parser.h"
#include "stablehlo/printer.h"

namespace fs = std::filesystem;
using namespace hlx;
using namespace hlx::shlo;

namespace {

std::vector<fs::path> corpus_files() {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(HLX_TESTDATA_DIR, ec)) return files;
  for (const auto& e : fs::directory_iterator(HLX_TESTDATA_DIR))
    if (e.path().extension() == ".mlir") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string strip_comments(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  bool started = false;
  while (std::getline(in, line)) {
    if (line.starts_with("//")) continue;
    if (!started && line.empty()) continue;
    started = true;
    out += line + "\n";
  }
  return out;
}

}  // namespace

TEST(CorpusParse, EveryProgramRoundTrips) {
  std::vector<fs::path> files = corpus_files();
  if (files.empty()) GTEST_SKIP() << "StableHLO corpus not found at " << HLX_TESTDATA_DIR;
  EXPECT_GE(files.size(), 1235u);
  int parsed = 0, identical_to_file = 0;
  std::vector<std::string> differ;
  for (const fs::path& p : files) {
    std::string text = read(p);
    Result<Module> m = parse_module(text, p.filename().string());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ++parsed;
    std::string first = print_module(*m);
    Result<Module> again = parse_module(first, "printed:" + p.filename().string());
    ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << first.substr(0, 2000);
    std::string second = print_module(*again);
    ASSERT_EQ(first, second) << p;
    if (first == strip_comments(text))
      ++identical_to_file;
    else if (differ.size() < 5)
      differ.push_back(p.filename().string());
  }
  EXPECT_EQ(parsed, int(files.size()));
  // Our printer reproduces stablehlo-opt's own output for every program.
  std::string names;
  for (const std::string& d : differ) names += d + " ";
  EXPECT_EQ(identical_to_file, int(files.size())) << "first differing files: " << names;
}
