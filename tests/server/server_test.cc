// Unit tests of the server layer's pieces that need no model: base64 (RFC 4648 test vectors),
// image header dimensions, image URL checks against an allowed directory, JSON body and request
// parsing, the HTTP request reader and disconnect detection over a socketpair, the API key
// comparison and the Prometheus rendering. The end-to-end behaviour is tests/server/test_server.py.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "server/http.h"
#include "server/image_input.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/server.h"
#include "tokenizer/template.h"

namespace hlx::server {
namespace {

namespace fs = std::filesystem;

TEST(Base64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"Zg==", "f"},
                                                         {"Zm8=", "fo"},
                                                         {"Zm9v", "foo"},
                                                         {"Zm9vYg==", "foob"},
                                                         {"Zm9vYmE=", "fooba"},
                                                         {"Zm9vYmFy", "foobar"},
                                                         {"Zg", "f"},
                                                         {"Zm8", "fo"}};
  for (auto [in, out] : vectors) {
    auto d = base64_decode(in);
    ASSERT_TRUE(d.has_value()) << in;
    EXPECT_EQ(*d, out) << in;
  }
  auto bin = base64_decode("AP8Q7w==");
  ASSERT_TRUE(bin.has_value());
  EXPECT_EQ(*bin, std::string("\x00\xff\x10\xef", 4));
}

TEST(Base64, RejectsInvalid) {
  for (const char* bad :
       {"Z", "Zg=", "Zm9v!", "Zh==", "Zm9=", "Zm 9v", "=Zm9", "Zm9v\n", "Zg===", "Zm-_", "Z===", "Zm9vY"})
    EXPECT_FALSE(base64_decode(bad).has_value()) << bad;
}

std::string png_header(uint32_t w, uint32_t h) {
  std::string b("\x89PNG\r\n\x1a\n", 8);
  b += std::string("\x00\x00\x00\x0d", 4) + "IHDR";
  for (uint32_t v : {w, h})
    for (int s = 24; s >= 0; s -= 8) b += char((v >> s) & 0xff);
  b += std::string("\x08\x02\x00\x00\x00", 5);
  return b;
}

TEST(ImageDimensions, PngAndJpeg) {
  auto png = image_dimensions(png_header(640, 480));
  ASSERT_TRUE(png.has_value());
  EXPECT_EQ(png->first, 640);
  EXPECT_EQ(png->second, 480);
  // SOI, an APP0 segment of 16 bytes, fill bytes, then SOF2 (progressive): height 300, width 200.
  std::string jpeg("\xff\xd8\xff\xe0\x00\x10", 6);
  jpeg += std::string(14, 'j');
  jpeg += std::string("\xff\xff\xc2\x00\x11\x08\x01\x2c\x00\xc8\x03", 11);
  auto j = image_dimensions(jpeg);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->first, 200);
  EXPECT_EQ(j->second, 300);
  // DHT (C4) is not a frame header; a scan before any frame gives up.
  std::string no_frame("\xff\xd8\xff\xc4\x00\x02\xff\xda\x00\x02", 10);
  EXPECT_FALSE(image_dimensions(no_frame).has_value());
  EXPECT_FALSE(image_dimensions("GIF89a").has_value());
  EXPECT_FALSE(image_dimensions(png_header(1, 1).substr(0, 20)).has_value());
}

class ImageUrlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("hlx_server_test_" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "allowed" / "sub");
    write(root_ / "allowed" / "sub" / "a.png", png_header(2, 2) + "rest");
    write(root_ / "outside.png", png_header(2, 2));
    write(root_ / "allowed" / "big.png", png_header(2, 2) + std::string(5000, 'x'));
    fs::create_symlink(root_ / "outside.png", root_ / "allowed" / "link.png");
    fs::create_directories(root_ / "allowed-sibling");
    write(root_ / "allowed-sibling" / "s.png", png_header(2, 2));
    limits_.allowed_dir = fs::canonical(root_ / "allowed").string();
    limits_.max_bytes = 1000;
  }
  void TearDown() override { fs::remove_all(root_); }
  static void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }
  ApiError read(const std::string& url, std::string& bytes) { return read_image_url(url, limits_, "p", bytes); }

  fs::path root_;
  ImageLimits limits_;
};

TEST_F(ImageUrlTest, AllowedDirectory) {
  std::string bytes;
  const std::string inside = (root_ / "allowed" / "sub" / "a.png").string();
  EXPECT_TRUE(read(inside, bytes).ok());
  EXPECT_EQ(bytes, png_header(2, 2) + "rest");
  EXPECT_TRUE(read("file://" + inside, bytes).ok());
  EXPECT_TRUE(read("file://localhost" + inside, bytes).ok());
  std::string encoded = inside;
  encoded.replace(encoded.find("a.png"), 1, "%61");  // percent-encoded 'a'
  EXPECT_TRUE(read("file://" + encoded, bytes).ok()) << encoded;
  EXPECT_TRUE(read((root_ / "allowed" / "sub" / ".." / "sub" / "a.png").string(), bytes).ok());

  for (const fs::path& p :
       {root_ / "outside.png", root_ / "allowed" / ".." / "outside.png", root_ / "allowed" / "link.png",
        root_ / "allowed" / "missing.png", root_ / "allowed" / "sub", root_ / "allowed-sibling" / "s.png"}) {
    ApiError e = read(p.string(), bytes);
    EXPECT_EQ(e.status, 400) << p;
    EXPECT_EQ(e.code, "image_path_not_allowed") << p;
    EXPECT_EQ(e.param, "p");
  }
  ApiError big = read((root_ / "allowed" / "big.png").string(), bytes);
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(big.code, "image_too_large");
  EXPECT_EQ(read("file://relative/a.png", bytes).code, "invalid_image_url");
  EXPECT_EQ(read("file://" + inside.substr(0, inside.size() - 4) + "%zz", bytes).code, "invalid_image_url");
  EXPECT_EQ(read("sub/a.png", bytes).code, "invalid_image_url");
  EXPECT_EQ(read("https://example.com/a.png", bytes).code, "invalid_image_url");

  ImageLimits closed = limits_;
  closed.allowed_dir.clear();
  EXPECT_EQ(read_image_url(inside, closed, "p", bytes).code, "image_path_not_allowed");
}

TEST_F(ImageUrlTest, DataUris) {
  std::string bytes;
  EXPECT_TRUE(read("data:image/png;base64,Zm9vYmFy", bytes).ok());
  EXPECT_EQ(bytes, "foobar");
  EXPECT_TRUE(read("data:;base64,Zm9v", bytes).ok());
  EXPECT_EQ(read("data:image/png;base64,Zm9v!", bytes).code, "invalid_base64");
  EXPECT_EQ(read("data:image/png,Zm9v", bytes).code, "invalid_image_url");
  EXPECT_EQ(read("data:image/png;base64", bytes).code, "invalid_image_url");
  EXPECT_EQ(read("data:text/plain;base64,Zm9v", bytes).code, "invalid_image_url");
  EXPECT_EQ(read("data:image/png;base64," + std::string(1400, 'A'), bytes).status, 413);
  mm::Image img;
  ApiError e = load_image_url("data:image/png;base64,aGVsbG8=", limits_, "p", img);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "invalid_image");
  ImageLimits few = limits_;
  few.max_pixels = 100;
  std::string b64;  // a PNG header claiming 20x10 = 200 pixels, base64-encoded by hand below
  {
    static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string raw = png_header(20, 10);
    while (raw.size() % 3) raw += '\0';
    for (size_t i = 0; i < raw.size(); i += 3) {
      uint32_t v = (uint8_t(raw[i]) << 16) | (uint8_t(raw[i + 1]) << 8) | uint8_t(raw[i + 2]);
      for (int s = 18; s >= 0; s -= 6) b64 += kAlphabet[(v >> s) & 63];
    }
  }
  e = load_image_url("data:image/png;base64," + b64, few, "p", img);
  EXPECT_EQ(e.status, 413);
  EXPECT_NE(e.message.find("20x10"), std::string::npos) << e.message;
}

TEST(JsonBody, DepthAndShape) {
  json v;
  EXPECT_TRUE(parse_json_body("{\"a\":" + std::string(63, '[') + std::string(63, ']') + "}", v).ok());  // depth 64
  EXPECT_EQ(parse_json_body("{\"a\":" + std::string(64, '[') + std::string(64, ']') + "}", v).code, "invalid_json");
  EXPECT_TRUE(parse_json_body("{\"a\": \"" + std::string(100, '[') + "\"}", v).ok());  // brackets in strings
  EXPECT_TRUE(parse_json_body("{\"a\": \"[[[[\\\"[[[[\"}", v).ok());
  ApiError e = parse_json_body("[1]", v);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "invalid_json");
  EXPECT_EQ(parse_json_body("{\"a\": 1", v).code, "invalid_json");
  EXPECT_EQ(parse_json_body("{\"a\": \"\xff\"}", v).code, "invalid_json");
}

// Issue 24: a number that overflows a double made nlohmann throw out_of_range (406), which no
// one caught: the process aborted. Now a typed 400 on either endpoint, known field or not.
TEST(JsonBody, NumbersOverflowingADoubleAreA400) {
  for (const std::string& body :
       {std::string(R"({"x":1e999})"), std::string(R"({"x":-1e999})"),
        "{\"max_tokens\":1" + std::string(400, '0') + "}", std::string(R"({"prompt":"hi","temperature":1e999})"),
        std::string(R"({"messages":[{"role":"user","content":"hi"}],"seed":-1e400})")}) {
    json v;
    ApiError e;
    ASSERT_NO_THROW(e = parse_json_body(body, v)) << body;
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.code, "invalid_json") << body;
  }
}

TEST(ChatRequest, MaxTokensAboveInt64IsAClearError) {
  for (const char* v : {"9223372036854775808", "18446744073709551615", "4294967296"}) {
    json body = json::parse(std::string(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":)") + v + "}");
    ChatRequest cr;
    ApiError e = parse_chat_request(body, cr);
    EXPECT_EQ(e.status, 400) << v;
    EXPECT_EQ(e.param, "max_tokens");
    EXPECT_NE(e.message.find(v), std::string::npos) << e.message;  // the value as sent, not wrapped
    EXPECT_EQ(e.message.find('-'), std::string::npos) << e.message;
  }
}

// Issue 24: chat_template_kwargs {"messages": ...} replaced the validated messages and
// {"tools": [...]} rendered tools the request validation refused.
TEST(ChatRequest, TemplateKwargsCannotReplaceReservedVariables) {
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  for (const char* key : {"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token",
                          "pad_token", "raise_exception", "range"}) {
    json body = json::parse("{" + msgs + R"(,"chat_template_kwargs":{")" + key + R"(":[{"role":5}]}})");
    ChatRequest cr;
    ApiError e = parse_chat_request(body, cr);
    EXPECT_EQ(e.status, 400) << key;
    EXPECT_EQ(e.code, "reserved_template_variable") << key;
    EXPECT_EQ(e.param, std::string("chat_template_kwargs.") + key);
    EXPECT_NE(e.message.find(key), std::string::npos) << e.message;
  }
  // The renderer refuses them too (a second line of defence for other callers).
  auto t = ChatTemplate::from_source("{{ messages[0].content }}");
  ASSERT_TRUE(t.ok());
  auto r = t->render(json::array({json{{"role", "user"}, {"content", "hi"}}}), true,
                     json{{"messages", json::array({json{{"role", "user"}, {"content", "evil"}}})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'messages'"), std::string::npos) << r.status().to_string();
  // Ordinary variables pass; bad names, too many entries and too many bytes do not.
  json ok = json::parse("{" + msgs + R"(,"chat_template_kwargs":{"enable_thinking":false,"x_1":[1,2]}})");
  ChatRequest cr;
  EXPECT_TRUE(parse_chat_request(ok, cr).ok());
  EXPECT_EQ(cr.template_kwargs["enable_thinking"], false);
  json bad = json::parse("{" + msgs + "}");
  bad["chat_template_kwargs"] = json{{"not a name", 1}};
  EXPECT_EQ(parse_chat_request(bad, cr).code, "invalid_value");
  bad["chat_template_kwargs"] = json::object();
  for (int i = 0; i < 33; ++i) bad["chat_template_kwargs"][std::string("k").append(std::to_string(i))] = i;
  EXPECT_EQ(parse_chat_request(bad, cr).code, "invalid_value");
  bad["chat_template_kwargs"] = json{{"big", std::string(70000, 'x')}};
  EXPECT_EQ(parse_chat_request(bad, cr).code, "invalid_value");
}

TEST(PromptLimits, RefusedWhileParsing) {
  PromptLimits lim{100, 10};
  json chat = json::parse(
      R"({"messages":[{"role":"system","content":"x"},{"role":"user","content":[{"type":"text","text":"y"}]}]})");
  chat["messages"][0]["content"] = std::string(60, 'a');
  chat["messages"][1]["content"][0]["text"] = std::string(40, 'b');
  ChatRequest cr;
  EXPECT_TRUE(parse_chat_request(chat, cr, lim).ok());  // 100 bytes
  chat["messages"][1]["content"][0]["text"] = std::string(41, 'b');
  ChatRequest cr2;
  ApiError e = parse_chat_request(chat, cr2, lim);
  EXPECT_EQ(e.code, "prompt_too_large");
  EXPECT_NE(e.message.find("101 bytes"), std::string::npos) << e.message;
  CompletionRequest comp;
  EXPECT_EQ(parse_completion_request(json{{"prompt", std::string(101, 'a')}}, comp, lim).code, "prompt_too_large");
  EXPECT_EQ(
      parse_completion_request(json{{"prompt", json::array({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})}}, comp, lim).code,
      "context_length_exceeded");
  CompletionRequest comp2;
  EXPECT_TRUE(
      parse_completion_request(json{{"prompt", json::array({1, 2, 3, 4, 5, 6, 7, 8, 9, 10})}}, comp2, lim).ok());
}

TEST(Logprobs, RequestFieldsPerEndpoint) {
  ChatRequest c;
  ASSERT_TRUE(parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "x"}],
      "logprobs": true, "top_logprobs": 20})"),
                                 c)
                  .ok());
  EXPECT_TRUE(c.params.sampling.logprobs);
  EXPECT_EQ(c.params.sampling.top_logprobs, 20);
  CompletionRequest k;
  ASSERT_TRUE(parse_completion_request(json::parse(R"({"prompt": "x", "logprobs": 0})"), k).ok());
  EXPECT_TRUE(k.params.sampling.logprobs);
  EXPECT_EQ(k.params.sampling.top_logprobs, 0);
  CompletionRequest off;
  ASSERT_TRUE(parse_completion_request(json::parse(R"({"prompt": "x", "logprobs": null})"), off).ok());
  EXPECT_FALSE(off.params.sampling.logprobs);
  CompletionRequest bad;
  ApiError e = parse_completion_request(json::parse(R"({"prompt": "x", "logprobs": 6})"), bad);
  EXPECT_EQ(e.param, "logprobs");
  EXPECT_NE(e.message.find("6"), std::string::npos) << e.message;
}

// Without a tokenizer: "token_id:<id>" and bytes null; -inf as -9999.0; text_offset continues
// from the given offset (streamed chunks).
TEST(Logprobs, ResponseShapes) {
  std::vector<engine::TokenLogprobs> lps(2);
  lps[0] = {7, -0.5, {{7, -0.5}, {3, -1.5}}};
  lps[1] = {9, -INFINITY, {{3, -0.25}}};
  const json chat = chat_logprobs_json(lps, nullptr);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["token"], "token_id:7");
  EXPECT_TRUE(chat["content"][0]["bytes"].is_null());
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], "token_id:3");
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["logprob"], -1.5);
  EXPECT_EQ(chat["content"][1]["logprob"], -9999.0);
  size_t offset = 10;
  const json legacy = completion_logprobs_json(lps, nullptr, &offset);
  EXPECT_EQ(legacy["tokens"], json::array({"token_id:7", "token_id:9"}));
  EXPECT_EQ(legacy["token_logprobs"], json::array({-0.5, -9999.0}));
  // The top ids plus the chosen one.
  EXPECT_EQ(legacy["top_logprobs"][1], (json{{"token_id:3", -0.25}, {"token_id:9", -9999.0}}));
  EXPECT_EQ(legacy["text_offset"], json::array({10, 10}));  // no bytes known without a tokenizer
}

TEST(ChatRequest, MessagesAndParams) {
  json body = json::parse(R"({
    "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null},
      {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x"}}, {"type": "text", "text": "c"}]}
    ],
    "max_tokens": 5, "max_completion_tokens": 7, "top_k": -1, "seed": 18446744073709551615,
    "stop": "x", "stream": true, "stream_options": {"include_usage": true}, "temperature": 0.5
  })");
  ChatRequest r;
  ApiError e = parse_chat_request(body, r);
  ASSERT_TRUE(e.ok()) << e.message;
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_EQ(r.messages[3]["content"], json::parse(R"([{"type":"image"},{"type":"text","text":"c"}])"));
  ASSERT_EQ(r.images.size(), 1u);
  EXPECT_EQ(r.images[0].url, "data:x");
  EXPECT_EQ(r.images[0].param, "messages[3].content[0].image_url.url");
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_EQ(r.params.sampling.top_k, 0);
  EXPECT_EQ(r.params.sampling.seed, 18446744073709551615ull);
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.5f);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.params.stream && r.params.include_usage);

  auto err = [](const char* text) {
    ChatRequest c;
    return parse_chat_request(json::parse(text), c);
  };
  EXPECT_EQ(err(R"({"messages": []})").code, "invalid_value");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2.5})").code, "invalid_type");
  EXPECT_TRUE(err(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2.0})").ok());
  EXPECT_EQ(err(R"({"messages": [{"role": "robot", "content": "x"}]})").param, "messages[0].role");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})").code, "unsupported");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})").param, "top_logprobs");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})").code,
            "invalid_value");
  EXPECT_TRUE(err(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false, "tools": []})").ok());
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a", ""]})").code, "invalid_value");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "x"}], "top_p": 1.5})").param, "top_p");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {}})").param, "stream_options");
}

TEST(CompletionRequest, PromptForms) {
  auto parse = [](const char* text, CompletionRequest& c) { return parse_completion_request(json::parse(text), c); };
  CompletionRequest a, b, c, d, e;
  EXPECT_TRUE(parse(R"({"prompt": "hi"})", a).ok());
  EXPECT_EQ(a.prompt_text, "hi");
  EXPECT_TRUE(parse(R"({"prompt": ["hi"]})", b).ok());
  EXPECT_EQ(b.prompt_text, "hi");
  EXPECT_TRUE(parse(R"({"prompt": [1, 2, 3]})", c).ok());
  EXPECT_EQ(c.prompt_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(parse(R"({"prompt": [[4, 5]]})", d).ok());
  EXPECT_EQ(d.prompt_ids, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(parse(R"({"prompt": ["a", "b"]})", e).code, "unsupported");
  EXPECT_EQ(parse(R"({"prompt": [1, "a"]})", e).code, "invalid_type");
  EXPECT_EQ(parse(R"({"prompt": {}})", e).code, "invalid_type");
  EXPECT_EQ(parse(R"({"prompt": "x", "echo": true})", e).code, "unsupported");
  EXPECT_EQ(parse(R"({})", e).code, "missing_field");
}

// A Connection over one end of a socketpair; the test writes the client side.
struct Pair {
  int client = -1, server = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    client = fds[0];
    server = fds[1];
  }
  ~Pair() {
    if (client >= 0) close(client);
  }
  void send(const std::string& s) const { ASSERT_EQ(::write(client, s.data(), s.size()), ssize_t(s.size())); }
  std::string drain() const {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(client, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
    return out;
  }
};

HttpLimits small_limits() {
  HttpLimits l;
  l.max_header_bytes = 256;
  l.max_headers = 4;
  l.max_body_bytes = 64;
  l.read_timeout_ms = 300;
  return l;
}

int read_status(const std::string& request, HttpRequest* out = nullptr) {
  Pair p;
  p.send(request);
  auto c = std::make_unique<Connection>(p.server, small_limits());
  HttpRequest req;
  HttpError err;
  Connection::ReadResult r = c->read_request(req, err);
  if (out) *out = req;
  close(p.client);  // first, so the Connection's lingering drain after an error ends at once
  p.client = -1;
  c.reset();
  if (r == Connection::ReadResult::kClosed) return -1;
  return r == Connection::ReadResult::kOk ? 0 : err.status;
}

TEST(HttpReader, ParsesARequest) {
  HttpRequest req;
  EXPECT_EQ(read_status(
                "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nX-Y:  v \r\n\r\nbodyEXTRA", &req),
            0);
  EXPECT_EQ(req.method, "POST");
  EXPECT_EQ(req.path, "/v1/completions");
  EXPECT_EQ(req.query, "x=1");
  EXPECT_EQ(req.body, "body");
  ASSERT_NE(req.header("x-y"), nullptr);
  EXPECT_EQ(*req.header("x-y"), "v");
  EXPECT_EQ(read_status("GET /health HTTP/1.0\r\n\r\n", &req), 0);
  EXPECT_EQ(req.minor_version, 0);
}

TEST(HttpReader, RejectsWithTheRightStatus) {
  EXPECT_EQ(read_status("GET /x HTTP/1.1\r\nA: " + std::string(300, 'a') + "\r\n\r\n"), 431);
  EXPECT_EQ(read_status("GET /x HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\n\r\n"), 431);
  EXPECT_EQ(read_status("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 65\r\n\r\n"), 413);
  EXPECT_EQ(read_status("POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"), 400);
  EXPECT_EQ(read_status("POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(read_status("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n0\r\n\r\n"), 501);
  EXPECT_EQ(read_status("POST /x HTTP/1.1\r\nHost: a\r\n\r\n"), 411);
  EXPECT_EQ(read_status("GET /x HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(read_status("GET x HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(read_status("GET /x  HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(read_status("GET /x HTTP/1.1\r\nA: 1\r\n folded\r\n\r\n"), 400);
  EXPECT_EQ(read_status("GET /x HTTP/1.1\r\nBad Name: 1\r\n\r\n"), 400);
  EXPECT_EQ(read_status("GET /x HTTP/1.1\r\nA: b\x01\r\n\r\n"), 400);
  EXPECT_EQ(read_status("POST /x HTTP/1.1\r\nHost: a\r\nExpect: magic\r\nContent-Length: 1\r\n\r\na"), 417);
  EXPECT_EQ(read_status("GET /x HTTP/1.1\r\nHost: a\r\n"), 408);                               // headers never end
  EXPECT_EQ(read_status("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\n\r\nabc"), 408);  // body too short
  EXPECT_EQ(read_status(""), -1);  // nothing sent: nothing to answer
}

// Issue 24: no Host was accepted, PUT/PATCH got 411 instead of reaching the router's 405, and a
// request with bare-LF line ends waited for the read timeout.
TEST(HttpReader, HostMethodsAndBareLf) {
  EXPECT_EQ(read_status("GET /health HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(read_status("GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
  EXPECT_EQ(read_status("GET /health HTTP/1.0\r\n\r\n"), 0);  // HTTP/1.0 has no Host requirement
  HttpRequest req;
  EXPECT_EQ(read_status("PUT /v1/models HTTP/1.1\r\nHost: a\r\n\r\n", &req), 0);
  EXPECT_EQ(req.method, "PUT");
  EXPECT_EQ(read_status("PATCH /v1/models HTTP/1.1\r\nHost: a\r\n\r\n"), 0);
  EXPECT_EQ(read_status("POST /v1/models HTTP/1.1\r\nHost: a\r\n\r\n"), 411);
  EXPECT_EQ(read_status("GET /health HTTP/1.1\nHost: a\nX-A: b\n\n", &req), 0);
  EXPECT_EQ(req.path, "/health");
  ASSERT_NE(req.header("x-a"), nullptr);
  EXPECT_EQ(*req.header("x-a"), "b");
  EXPECT_EQ(read_status("POST /x HTTP/1.1\nHost: a\r\nContent-Length: 2\n\r\nokEXTRA", &req), 0);
  EXPECT_EQ(req.body, "ok");
  EXPECT_EQ(read_status("GET /x\rHTTP/1.1\nHost: a\n\n"), 400);  // a bare CR is no line end
}

TEST(HttpReader, ExpectContinueAndResponses) {
  Pair p;
  p.send("POST /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
  std::thread writer([&] {
    char buf[64];
    ssize_t n = ::read(p.client, buf, sizeof buf);
    EXPECT_EQ(std::string(buf, size_t(std::max<ssize_t>(n, 0))), "HTTP/1.1 100 Continue\r\n\r\n");
    p.send("ok");
  });
  {
    Connection c(p.server, small_limits());
    HttpRequest req;
    HttpError err;
    ASSERT_EQ(c.read_request(req, err), Connection::ReadResult::kOk);
    writer.join();
    EXPECT_EQ(req.body, "ok");
    EXPECT_TRUE(c.begin_stream(200, "text/event-stream"));
    EXPECT_TRUE(c.send_piece("data: 1\n\n"));
    EXPECT_TRUE(c.end_stream());
  }
  EXPECT_EQ(p.drain(),
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            "9\r\ndata: 1\n\n\r\n0\r\n\r\n");
}

// Issue 20: chunked request bodies were refused with 501.
TEST(HttpReader, ChunkedBodies) {
  HttpRequest req;
  const std::string head = "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(read_status(head + "4\r\nbody\r\nA;ext=1\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n", &req), 0);
  EXPECT_EQ(req.body, "body0123456789");
  EXPECT_EQ(read_status(head + "3\nabc\n0\n\n", &req), 0);  // bare LF line ends, as for headers
  EXPECT_EQ(req.body, "abc");
  EXPECT_EQ(read_status(head + "0\r\n\r\n", &req), 0);
  EXPECT_EQ(req.body, "");
  EXPECT_EQ(read_status("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n", &req),
            0);
  EXPECT_EQ(req.body, "z");
  // Exactly the limit (64), then one byte over it, in several chunks.
  EXPECT_EQ(
      read_status(head + "20\r\n" + std::string(32, 'a') + "\r\n20\r\n" + std::string(32, 'b') + "\r\n0\r\n\r\n", &req),
      0);
  EXPECT_EQ(req.body.size(), 64u);
  EXPECT_EQ(read_status(head + "20\r\n" + std::string(32, 'a') + "\r\n21\r\n" + std::string(33, 'b') + "\r\n0\r\n\r\n"),
            413);
  EXPECT_EQ(read_status(head + "fffffffffffffff\r\n"), 413);
  EXPECT_EQ(read_status(head + "ffffffffffffffff\r\n"), 400);  // more digits than any size we take
  EXPECT_EQ(read_status(head + "zz\r\nab\r\n0\r\n\r\n"), 400);
  EXPECT_EQ(read_status(head + "-1\r\n"), 400);
  EXPECT_EQ(read_status(head + "\r\n"), 400);
  EXPECT_EQ(read_status(head + "3\r\nabcd\r\n0\r\n\r\n"), 400);  // data longer than its size
  EXPECT_EQ(read_status(head + "5\r\nab\r\n0\r\n\r\n"), 400);    // shorter: its CRLF is missing further on
  EXPECT_EQ(read_status(head + "5\r\nab"), 408);                 // the rest never comes
  EXPECT_EQ(read_status(head + std::string(2000, '0')), 400);    // a size line without end
  EXPECT_EQ(read_status(head + "3\r\nabc\r\n"), 408);            // no last chunk
  EXPECT_EQ(read_status("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
                        "3\r\nabc\r\n0\r\n\r\n"),
            400);  // both framings: refused (request smuggling)
  EXPECT_EQ(read_status("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(read_status("POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 400);
}

// Issue 20: one request per connection; bytes after the first request were dropped.
TEST(HttpReader, PipelinedRequestsAndKeepAlive) {
  Pair p;
  p.send(
      "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nokGET /b HTTP/1.1\r\nHost: h\r\n\r\n"
      "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n"
      "GET /d HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  Connection c(p.server, small_limits());
  HttpRequest req;
  HttpError err;
  ASSERT_EQ(c.read_request(req, err), Connection::ReadResult::kOk);
  EXPECT_EQ(req.path, "/a");
  EXPECT_EQ(req.body, "ok");
  EXPECT_TRUE(c.keep_alive());
  EXPECT_TRUE(c.send_response(200, "text/plain", "1"));
  EXPECT_TRUE(c.response_complete());
  EXPECT_TRUE(c.wait_for_request(0));
  req = HttpRequest();
  ASSERT_EQ(c.read_request(req, err), Connection::ReadResult::kOk);
  EXPECT_EQ(req.path, "/b");
  EXPECT_FALSE(c.response_complete());
  EXPECT_TRUE(c.begin_stream(200, "text/event-stream"));
  EXPECT_TRUE(c.send_piece("x"));
  EXPECT_TRUE(c.end_stream());
  EXPECT_TRUE(c.response_complete());
  EXPECT_TRUE(c.keep_alive());  // a chunked stream ends cleanly: the connection stays
  req = HttpRequest();
  ASSERT_EQ(c.read_request(req, err), Connection::ReadResult::kOk);
  EXPECT_EQ(req.path, "/c");
  EXPECT_EQ(req.body, "xy");
  c.set_keep_alive(false);  // the server's veto (e.g. the per-connection cap)
  EXPECT_TRUE(c.send_response(200, "text/plain", "3"));
  req = HttpRequest();
  ASSERT_EQ(c.read_request(req, err), Connection::ReadResult::kOk);
  EXPECT_EQ(req.path, "/d");
  EXPECT_FALSE(c.keep_alive());          // Connection: close
  EXPECT_FALSE(c.wait_for_request(10));  // nothing more arrives
  ::shutdown(p.client, SHUT_WR);
  std::string out;
  char buf[1024];
  for (ssize_t n; (n = ::recv(p.client, buf, sizeof buf, MSG_DONTWAIT)) > 0;) out.append(buf, size_t(n));
  EXPECT_EQ(
      out,
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\r\n1"
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1\r\nConnection: close\r\n\r\n3");
}

TEST(HttpReader, Http10KeepAliveOnlyWhenAsked) {
  for (auto [request, keep] : {std::pair<const char*, bool>{"GET /x HTTP/1.0\r\n\r\n", false},
                               {"GET /x HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true},
                               {"GET /x HTTP/1.1\r\nHost: a\r\nConnection: foo, close\r\n\r\n", false},
                               {"GET /x HTTP/1.1\r\nHost: a\r\n\r\n", true}}) {
    Pair p;
    p.send(request);
    Connection c(p.server, small_limits());
    HttpRequest req;
    HttpError err;
    ASSERT_EQ(c.read_request(req, err), Connection::ReadResult::kOk) << request;
    EXPECT_EQ(c.keep_alive(), keep) << request;
    if (std::string(request).find("1.0\r\nConn") != std::string::npos) {
      EXPECT_TRUE(c.begin_stream(200, "text/event-stream"));  // close-delimited: cannot keep
      EXPECT_FALSE(c.keep_alive());
    }
  }
  // A read error ends the connection whatever the request asked.
  Pair p;
  p.send("GET /x HTTP/1.1\r\nHost: a\r\nContent-Length: 99\r\n\r\n");
  Connection c(p.server, small_limits());
  HttpRequest req;
  HttpError err;
  ASSERT_EQ(c.read_request(req, err), Connection::ReadResult::kError);
  EXPECT_EQ(err.status, 413);
  EXPECT_FALSE(c.keep_alive());
  close(p.client);  // so the Connection's lingering drain ends at once
  p.client = -1;
}

TEST(HttpReader, WaitSeesWakeTimeoutAndDisconnect) {
  Pair p;
  int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  Connection c(p.server, small_limits());
  EXPECT_EQ(c.wait(efd, 10), Connection::Wait::kTimeout);
  uint64_t one = 1;
  ASSERT_EQ(::write(efd, &one, sizeof one), 8);
  EXPECT_EQ(c.wait(efd, 1000), Connection::Wait::kWake);
  ASSERT_EQ(::read(efd, &one, sizeof one), 8);
  p.send("pipelined bytes are not a disconnect");
  EXPECT_EQ(c.wait(efd, 10), Connection::Wait::kTimeout);
  EXPECT_FALSE(c.peer_closed());
  close(p.client);
  p.client = -1;
  EXPECT_EQ(c.wait(efd, 1000), Connection::Wait::kPeerClosed);
  EXPECT_TRUE(c.peer_closed());
  close(efd);
}

TEST(ApiKey, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("sk-abc", "sk-abc"));
  EXPECT_FALSE(constant_time_equal("sk-abc", "sk-abd"));
  EXPECT_FALSE(constant_time_equal("sk-abc", "sk-ab"));
  EXPECT_FALSE(constant_time_equal("", "x"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

TEST(ApiErrorJson, Shape) {
  ApiError e = bad_request("bad \xff", "", "c");
  json j = json::parse(e.to_json());
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "c");
  EXPECT_EQ(j["error"].size(), 4u);
  EXPECT_EQ(from_status(make_error(ErrorKind::kCapacityExceeded, "x"), "prompt").code, "context_length_exceeded");
  EXPECT_EQ(from_status(make_error(ErrorKind::kInternal, "x")).status, 500);
}

TEST(MetricsText, CountersAndHistogram) {
  Metrics m;
  m.count_request("completions", "ok");
  m.count_request("completions", "ok");
  m.count_request("health", "ok");
  m.observe_ttft(0.003);
  m.observe_ttft(0.3);
  m.observe_ttft(100);
  m.add_prefill(10, 0.5);
  std::string t = m.render({2, 1, 4, 3});
  EXPECT_NE(t.find("hlx_requests_total{endpoint=\"completions\",outcome=\"ok\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("hlx_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("hlx_time_to_first_token_seconds_bucket{le=\"0.25\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("hlx_time_to_first_token_seconds_bucket{le=\"0.5\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("hlx_time_to_first_token_seconds_bucket{le=\"60\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("hlx_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("hlx_time_to_first_token_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(t.find("hlx_prefill_tokens_per_second 20\n"), std::string::npos);
  EXPECT_NE(t.find("hlx_queue_depth 2\n"), std::string::npos);
  EXPECT_NE(t.find("hlx_requests_in_flight 3\n"), std::string::npos);
}

}  // namespace
}  // namespace hlx::server
