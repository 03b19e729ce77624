#include "runtime/tokenizer/unicode.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace troupe::tokenizer {
namespace {

#include "runtime/tokenizer/unicode_data.inc"

template <std::size_t N>
bool in_ranges(const std::uint32_t (&r)[N][2], char32_t cp) {
  auto it = std::upper_bound(std::begin(r), std::end(r), std::uint32_t(cp),
                             [](std::uint32_t v, const std::uint32_t(&range)[2]) { return v < range[0]; });
  if (it == std::begin(r)) return false;
  --it;
  return cp <= (*it)[1];
}

int combining_class(char32_t cp) {
  auto it = std::upper_bound(std::begin(ccc_ranges), std::end(ccc_ranges), std::uint32_t(cp),
                             [](std::uint32_t v, const std::uint32_t(&r)[3]) { return v < r[0]; });
  if (it == std::begin(ccc_ranges)) return 0;
  --it;
  return cp <= (*it)[1] ? int((*it)[2]) : 0;
}

constexpr char32_t s_base = 0xAC00, l_base = 0x1100, v_base = 0x1161, t_base = 0x11A7;
constexpr int l_count = 19, v_count = 21, t_count = 28, n_count = v_count * t_count, s_count = l_count * n_count;

void decompose(char32_t cp, std::u32string& out) {
  if (cp >= s_base && cp < s_base + s_count) {  // Hangul syllable
    int s = int(cp - s_base);
    out.push_back(l_base + s / n_count);
    out.push_back(v_base + (s % n_count) / t_count);
    if (s % t_count) out.push_back(t_base + s % t_count);
    return;
  }
  auto it = std::lower_bound(std::begin(decomp_index), std::end(decomp_index), std::uint32_t(cp),
                             [](const std::uint32_t(&r)[3], std::uint32_t v) { return r[0] < v; });
  if (it != std::end(decomp_index) && (*it)[0] == cp) {
    for (std::uint32_t i = 0; i < (*it)[2]; ++i) out.push_back(decomp_flat[(*it)[1] + i]);
    return;
  }
  out.push_back(cp);
}

char32_t compose(char32_t a, char32_t b) {
  if (a >= l_base && a < l_base + l_count && b >= v_base && b < v_base + v_count)
    return s_base + ((a - l_base) * v_count + (b - v_base)) * t_count;
  if (a >= s_base && a < s_base + s_count && (a - s_base) % t_count == 0 && b > t_base && b < t_base + t_count)
    return a + (b - t_base);
  auto it = std::lower_bound(std::begin(compose_pairs), std::end(compose_pairs), std::pair<std::uint32_t, std::uint32_t>(a, b),
                             [](const std::uint32_t(&r)[3], const std::pair<std::uint32_t, std::uint32_t>& v) {
                               return r[0] < v.first || (r[0] == v.first && r[1] < v.second);
                             });
  if (it != std::end(compose_pairs) && (*it)[0] == a && (*it)[1] == b) return (*it)[2];
  return 0;
}

}  // namespace

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = cp << 6 | (cc & 0x3f);
    }
    // Reject overlong forms, surrogates and values past U+10FFFF.
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
               (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF))
      ok = false;
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(char(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(char(0x80 | (cp & 0x3f)));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

std::size_t utf8_complete_prefix(std::string_view s) {
  std::size_t i = 0, good = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) break;
    bool ok = true;
    for (std::size_t k = 1; k < len; ++k) ok = ok && (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (!ok) break;
    i += len;
    good = i;
  }
  return good;
}

std::size_t utf8_incomplete_tail(std::string_view s) {
  for (std::size_t k = 1; k <= 3 && k <= s.size(); ++k) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - k]);
    if ((c & 0xc0) == 0x80) continue;  // a continuation byte: look further back for its lead
    const std::size_t len = (c >> 5) == 6 && c >= 0xc2 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 && c <= 0xf4 ? 4 : 1;
    return len > k ? k : 0;
  }
  return 0;
}

std::string utf8_sanitize(std::string_view s) { return utf8_encode(utf8_decode(s)); }

namespace {

// The Basic Multilingual Plane's categories in a table (a regex asks for every character it
// tries), the other planes by binary search over the runs.
general_category search_category(char32_t cp) {
  const std::size_t n = sizeof(category_runs) / sizeof(category_runs[0]);
  std::size_t lo = 0, hi = n;
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (category_runs[mid][1] < cp) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && category_runs[lo][0] <= cp ? general_category(category_runs[lo][2]) : general_category::cn;
}

const std::vector<general_category>& bmp_categories() {
  static const std::vector<general_category> table = [] {
    std::vector<general_category> t(0x10000, general_category::cn);
    for (const auto& r : category_runs)
      for (std::uint32_t cp = r[0]; cp <= r[1] && cp < 0x10000; ++cp) t[cp] = general_category(r[2]);
    return t;
  }();
  return table;
}

constexpr std::uint32_t bit(general_category c) { return 1u << unsigned(c); }

}  // namespace

general_category category_of(char32_t cp) { return cp < 0x10000 ? bmp_categories()[cp] : search_category(cp); }

std::uint32_t category_mask(std::u32string_view name) {
  using g = general_category;
  static const std::pair<const char*, std::uint32_t> majors[] = {
      {"L", bit(g::lu) | bit(g::ll) | bit(g::lt) | bit(g::lm) | bit(g::lo)},
      {"Letter", bit(g::lu) | bit(g::ll) | bit(g::lt) | bit(g::lm) | bit(g::lo)},
      {"LC", bit(g::lu) | bit(g::ll) | bit(g::lt)}, {"L&", bit(g::lu) | bit(g::ll) | bit(g::lt)},
      {"Cased_Letter", bit(g::lu) | bit(g::ll) | bit(g::lt)},
      {"M", bit(g::mn) | bit(g::mc) | bit(g::me)}, {"Mark", bit(g::mn) | bit(g::mc) | bit(g::me)},
      {"N", bit(g::nd) | bit(g::nl) | bit(g::no)}, {"Number", bit(g::nd) | bit(g::nl) | bit(g::no)},
      {"P", bit(g::pc) | bit(g::pd) | bit(g::ps) | bit(g::pe) | bit(g::pi) | bit(g::pf) | bit(g::po)},
      {"Punctuation", bit(g::pc) | bit(g::pd) | bit(g::ps) | bit(g::pe) | bit(g::pi) | bit(g::pf) | bit(g::po)},
      {"S", bit(g::sm) | bit(g::sc) | bit(g::sk) | bit(g::so)}, {"Symbol", bit(g::sm) | bit(g::sc) | bit(g::sk) | bit(g::so)},
      {"Z", bit(g::zs) | bit(g::zl) | bit(g::zp)}, {"Separator", bit(g::zs) | bit(g::zl) | bit(g::zp)},
      {"C", bit(g::cc) | bit(g::cf) | bit(g::cs) | bit(g::co) | bit(g::cn)},
      {"Other", bit(g::cc) | bit(g::cf) | bit(g::cs) | bit(g::co) | bit(g::cn)},
  };
  static const char* const shorts[] = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
                                       "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};
  static const char* const longs[] = {
      "Uppercase_Letter", "Lowercase_Letter", "Titlecase_Letter", "Modifier_Letter", "Other_Letter", "Nonspacing_Mark",
      "Spacing_Mark", "Enclosing_Mark", "Decimal_Number", "Letter_Number", "Other_Number", "Connector_Punctuation",
      "Dash_Punctuation", "Open_Punctuation", "Close_Punctuation", "Initial_Punctuation", "Final_Punctuation",
      "Other_Punctuation", "Math_Symbol", "Currency_Symbol", "Modifier_Symbol", "Other_Symbol", "Space_Separator",
      "Line_Separator", "Paragraph_Separator", "Control", "Format", "Surrogate", "Private_Use", "Unassigned"};
  const std::string n = utf8_encode(name);
  for (const auto& [k, m] : majors)
    if (n == k) return m;
  for (unsigned c = 0; c < 30; ++c)
    if (n == shorts[c] || n == longs[c]) return 1u << c;
  return 0;
}

bool is_space(char32_t cp) { return in_ranges(space_ranges, cp); }

namespace {

// A character's mapping in one of the generated flat tables, appended to `out`; false if it has none.
template <std::size_t N>
bool mapped(const std::uint32_t (&index)[N][3], const std::uint32_t* flat, char32_t cp, std::u32string& out) {
  auto it = std::lower_bound(std::begin(index), std::end(index), std::uint32_t(cp),
                             [](const std::uint32_t(&r)[3], std::uint32_t v) { return r[0] < v; });
  if (it == std::end(index) || (*it)[0] != cp) return false;
  for (std::uint32_t i = 0; i < (*it)[2]; ++i) out.push_back(flat[(*it)[1] + i]);
  return true;
}

// Decomposed (compatibility mappings too with `compat`) and canonically ordered.
std::u32string decomposed(std::u32string_view s, bool compat) {
  std::u32string d;
  d.reserve(s.size());
  for (char32_t c : s)
    if (!compat || !mapped(kdecomp_index, kdecomp_flat, c, d)) decompose(c, d);
  // Canonical ordering: stable-sort each run of non-starters by combining class.
  for (std::size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + long(i), d.begin() + long(j),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  return d;
}

// Canonical composition of a decomposed, ordered string.
std::u32string composed(std::u32string d) {
  if (d.empty()) return d;
  std::u32string out;
  out.reserve(d.size());
  out.push_back(d[0]);
  std::size_t starter = 0;
  int last_class = combining_class(d[0]) ? 256 : 0;
  for (std::size_t i = 1; i < d.size(); ++i) {
    char32_t ch = d[i];
    int cls = combining_class(ch);
    char32_t comp = compose(out[starter], ch);
    if (comp && (last_class < cls || last_class == 0)) {
      out[starter] = comp;
      continue;
    }
    if (cls == 0) starter = out.size();
    last_class = cls;
    out.push_back(ch);
  }
  return out;
}

bool ascii(std::u32string_view s) {
  return std::all_of(s.begin(), s.end(), [](char32_t c) { return c < 0x80; });
}

}  // namespace

// ASCII is the same in every normalization form.
std::u32string nfc(std::u32string_view s) { return ascii(s) ? std::u32string(s) : composed(decomposed(s, false)); }
std::u32string nfd(std::u32string_view s) { return ascii(s) ? std::u32string(s) : decomposed(s, false); }
std::u32string nfkc(std::u32string_view s) { return ascii(s) ? std::u32string(s) : composed(decomposed(s, true)); }
std::u32string nfkd(std::u32string_view s) { return ascii(s) ? std::u32string(s) : decomposed(s, true); }

std::u32string lowercase(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s)
    if (!mapped(lower_index, lower_flat, c, out)) out.push_back(c);
  return out;
}

}  // namespace troupe::tokenizer
