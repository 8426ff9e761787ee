// Pre-tokenizers: the hand-written equivalent of the Qwen2/Qwen3 Split regex, a plain string
// split, and the GPT-2 byte-level alphabet.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hlx::tok {

// The exact Split pattern of Qwen2/Qwen3 tokenizer.json (GPT-4 style, single digits):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
inline constexpr std::string_view kQwenSplitPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Splits valid UTF-8 `text` into the matches of kQwenSplitPattern (behaviour "Isolated"), with
// Oniguruma's leftmost-first alternation and backtracking semantics. Pieces cover the input.
Result<std::vector<std::string_view>> split_qwen(std::string_view text);

// Split on a literal delimiter with behaviour "MergedWithPrevious": each delimiter stays at the
// end of the piece before it.
std::vector<std::string_view> split_merged_with_previous(std::string_view text, std::string_view delimiter);

// GPT-2 byte-level alphabet: every byte maps to one printable code point (UTF-8 encoded).
const std::array<std::string, 256>& byte_level_chars();
// The bytes of `text` mapped through byte_level_chars().
std::string byte_level_encode(std::string_view text);
// Inverse mapping; false when a code point of `token` is outside the alphabet.
bool byte_level_decode(std::string_view token, std::string* bytes);

}  // namespace hlx::tok
