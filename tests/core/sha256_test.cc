#include "core/sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace hlx {
namespace {

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqr"
                       "smnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotAndDigestIsIdempotent) {
  std::mt19937 rng(7);
  std::string data(777, '\0');
  for (char& c : data) c = char(rng());
  const std::string want = sha256_hex(data);
  for (size_t chunk : {1, 3, 63, 64, 65, 200}) {
    Sha256 h;
    for (size_t i = 0; i < data.size(); i += chunk) h.update(std::string_view(data).substr(i, chunk));
    EXPECT_EQ(h.hex_digest(), want) << "chunk " << chunk;
    EXPECT_EQ(h.hex_digest(), want) << "second digest call";
  }
}

// Random inputs of every length around the block and padding boundaries, against Python's hashlib.
TEST(Sha256, MatchesPythonHashlibOnRandomInputs) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "/usr/bin/python3 not available";
  char dir_template[] = "/tmp/hlx_sha256_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  std::mt19937 rng(1234);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 140; ++n) lengths.push_back(n);
  for (int i = 0; i < 20; ++i) lengths.push_back(size_t(rng() % 5000));
  std::vector<std::string> inputs;
  for (size_t i = 0; i < lengths.size(); ++i) {
    std::string s(lengths[i], '\0');
    for (char& c : s) c = char(rng());
    inputs.push_back(s);
    std::ofstream(dir + "/" + std::to_string(i), std::ios::binary) << s;
  }
  const std::string cmd = "/usr/bin/python3 -c \"import hashlib,sys\nfor i in range(" + std::to_string(inputs.size()) +
                          "): print(hashlib.sha256(open('" + dir + "/%d' % i,'rb').read()).hexdigest())\"";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0);
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  for (; std::getline(lines, line) && i < inputs.size(); ++i)
    EXPECT_EQ(sha256_hex(inputs[i]), line) << "input " << i << " of length " << inputs[i].size();
  EXPECT_EQ(i, inputs.size());
  int rc = std::system(("rm -rf " + dir).c_str());
  (void)rc;
}

}  // namespace
}  // namespace hlx
