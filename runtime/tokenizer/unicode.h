// The Unicode facts the tokenizer needs: UTF-8 coding, the classes its pre-tokenizer regexes
// use (\p{..} general categories, \s) and NFC normalisation. Tables come from scripts/gen_unicode_data.py.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::tokenizer {

// Decodes UTF-8; an invalid byte becomes U+FFFD (one per byte), as the HF tokenizers do.
std::u32string utf8_decode(std::string_view s);
void utf8_append(std::string& out, char32_t cp);
std::string utf8_encode(std::u32string_view s);

// Length of the longest prefix of `s` made of complete, valid UTF-8 characters.
std::size_t utf8_complete_prefix(std::string_view s);
// `s` with every invalid or truncated sequence replaced by U+FFFD.
std::string utf8_sanitize(std::string_view s);
// The length (1 to 3) of a trailing sequence that a later byte could still complete into one
// character (a lead byte and fewer continuation bytes than it announces); 0 if there is none,
// including when the tail is invalid whatever follows.
std::size_t utf8_incomplete_tail(std::string_view s);

// General categories, in the order of the generated table (scripts/gen_unicode_data.py).
enum class general_category : std::uint8_t {
  lu, ll, lt, lm, lo, mn, mc, me, nd, nl, no, pc, pd, ps, pe, pi, pf, po, sm, sc, sk, so, zs, zl, zp, cc, cf, cs, co, cn
};
general_category category_of(char32_t cp);  // cn for an unassigned code point
// The categories a \p{NAME} class names, one bit per general_category: a category ("Lu"), a
// major class ("L"), their long names ("Uppercase_Letter", "Letter") or "L&"/"LC" (cased
// letters). 0: not a general category.
std::uint32_t category_mask(std::u32string_view name);

bool is_space(char32_t cp);   // White_Space property (Oniguruma's Unicode \s)

// Unicode Normalization Forms C, D, KC and KD.
std::u32string nfc(std::u32string_view s);
std::u32string nfd(std::u32string_view s);
std::u32string nfkc(std::u32string_view s);
std::u32string nfkd(std::u32string_view s);
// Each character's full lowercase mapping (U+0130 becomes two), without context (no word-final
// sigma), as Rust's char::to_lowercase and so the Lowercase normalizer give it.
std::u32string lowercase(std::u32string_view s);

}  // namespace troupe::tokenizer
