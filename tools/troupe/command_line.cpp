#include "tools/troupe/command_line.h"

#include <CLI/CLI.hpp>

#include <cctype>
#include <cstdio>
#include <deque>
#include <exception>
#include <set>
#include <vector>

#include "runtime/common/error.h"

namespace troupe::cli {

namespace {

constexpr std::size_t name_column = 25;  // where a flag's help starts
constexpr std::size_t line_width = 100;

// `text` wrapped at line_width, the first line starting at column `col`, later ones at `indent`;
// the text's own line breaks are kept.
std::string wrap(const std::string& text, std::size_t col, std::size_t indent) {
  std::string out;
  std::size_t start = 0;
  bool first_line = true;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (!first_line) out += "\n" + std::string(indent, ' '), col = indent;
    first_line = false;
    bool line_start = true;
    for (std::size_t w = start; w < end;) {
      if (text[w] == ' ') {
        ++w;
        continue;
      }
      std::size_t we = text.find(' ', w);
      if (we == std::string::npos || we > end) we = end;
      const std::size_t len = we - w;
      if (!line_start && col + 1 + len > line_width) out += "\n" + std::string(indent, ' '), col = indent, line_start = true;
      if (!line_start) out += ' ', ++col;
      out.append(text, w, len);
      col += len;
      line_start = false;
      w = we;
    }
    start = end + 1;
  }
  return out;
}

std::vector<const CLI::App*> children(const CLI::App* app) {
  return app->get_subcommands([](const CLI::App*) { return true; });
}

// The leaf a command line named: the last subcommand parsed.
CLI::App* deepest(CLI::App* app) {
  for (auto subs = app->get_subcommands(); !subs.empty(); subs = app->get_subcommands()) app = subs.front();
  return app;
}

std::string path_of(const CLI::App* app) {
  std::string p;
  for (; app->get_parent(); app = app->get_parent()) p = app->get_name() + (p.empty() ? "" : " " + p);
  return p;
}

}  // namespace

// Writes a command's help: the usage line, the paragraph about it, its subcommands (a group's
// whole tree), every flag it declared with its help, then its footer.
class command_line::formatter : public CLI::FormatterBase {
 public:
  explicit formatter(const command_line& cl) : cl_(cl) {}

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode) const override {
    const text* t = cl_.text_of(app);
    std::string out = "usage: " + name + (t && !t->synopsis.empty() ? " " + t->synopsis : "") + "\n";
    if (t && !t->about.empty()) out += wrap(t->about, 0, 0) + "\n";
    if (!children(app).empty()) {
      out += "\ncommands:\n";
      list(app, "", out);
    }
    std::string flags;
    for (const CLI::Option* o : app->get_options())
      if (o != app->get_help_ptr()) flags += entry(shown(o), o->get_description());
    flags += entry("-h, --help", "this text");
    out += "\n" + flags;
    if (t && !t->footer.empty()) out += "\n" + t->footer + (t->footer.back() == '\n' ? "" : "\n");
    return out;
  }

 private:
  static std::string shown(const CLI::Option* o) {
    if (!o->nonpositional()) return o->get_option_text();
    const std::string n = (o->get_snames().empty() ? "" : "-" + o->get_snames().front() + ", ") + "--" + o->get_lnames().front();
    return o->get_items_expected_max() == 0 ? n : n + " " + o->get_type_name();
  }

  static std::string entry(const std::string& name, const std::string& help) {
    std::string line = "  " + name;
    if (line.size() + 2 > name_column) line += "  ";
    else line.resize(name_column, ' ');
    return line + wrap(help, line.size(), name_column) + "\n";
  }

  // Every command under `app`, by its path from there: groups are not lines of their own.
  void list(const CLI::App* app, const std::string& prefix, std::string& out) const {
    for (const CLI::App* sub : children(app)) {
      const std::string path = prefix + sub->get_name();
      const text* t = cl_.text_of(sub);
      if ((t && t->run) || children(sub).empty()) out += entry(path, sub->get_description());
      list(sub, path + " ", out);
    }
  }

  const command_line& cl_;
};

command& command::flag(const std::string& name, const std::string& help) {
  app_->add_flag("--" + name)->description(help);
  return *this;
}

command& command::option(const std::string& name, const std::string& value, const std::string& help) {
  // Every value is kept (TakeAll) so that a flag given twice is refused by name, not resolved.
  // "o,out" declares -o as a short name of --out.
  const auto comma = name.find(',');
  const std::string names = comma == std::string::npos ? "--" + name : "-" + name.substr(0, comma) + ",--" + name.substr(comma + 1);
  app_->add_option(names, help)->type_name(value)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return *this;
}

command& command::positional(const std::string& shown, const std::string& help, int max) {
  auto& store = owner_->positionals_.emplace_back();
  app_->add_option("positional", store, help)->option_text(shown)->expected(0, CLI::detail::expected_max_vector_size);
  owner_->texts_[app_].max_positional = max;
  return *this;
}

command& command::log_flags(const std::string& default_level) {
  option("log-level", "LEVEL", "debug, info, warn, error or off (default " + default_level + ")");
  return option("log-format", "FORMAT", "text (default) or json: one JSON object per line on stderr");
}

command& command::footer(const std::string& text) {
  owner_->texts_[app_].footer = text;
  return *this;
}

command command::sub(const std::string& name, const std::string& summary, const std::string& synopsis, const std::string& about,
                     runner run) {
  CLI::App* app = app_->add_subcommand(name, summary);
  app->allow_extras();  // collected and refused by name (command_line::run), not as CLI11 words them
  // One command per command line: without this, a word after a command that names another one
  // (`troupe admin log-level info`) would start that command instead of being an argument.
  app->require_subcommand(0, 1);
  auto& t = owner_->texts_[app];
  t.synopsis = synopsis;
  t.about = about;
  t.run = std::move(run);
  return command(app, owner_);
}

command_line::command_line() : root_(std::make_unique<CLI::App>("", "troupe")), formatter_(std::make_shared<formatter>(*this)) {
  root_->formatter(formatter_);
  root_->require_subcommand(0, 1);  // see command::sub
  texts_[root_.get()].synopsis = "COMMAND [options]";
  texts_[root_.get()].about = "Serve, run and measure large language models.";
}

command_line::~command_line() = default;

command command_line::root() { return command(root_.get(), this); }

const command_line::text* command_line::text_of(const CLI::App* app) const {
  auto it = texts_.find(app);
  return it == texts_.end() ? nullptr : &it->second;
}

const CLI::App* command_line::find(const std::string& path) const {
  const CLI::App* app = root_.get();
  for (std::size_t at = 0; app && at < path.size();) {
    std::size_t end = path.find(' ', at);
    if (end == std::string::npos) end = path.size();
    const std::string word = path.substr(at, end - at);
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : children(app))
      if (sub->get_name() == word) next = sub;
    app = next;
    at = end + 1;
  }
  return app;
}

std::string command_line::help_of(const CLI::App* app) const {
  const std::string path = path_of(app);
  return formatter_->make_help(app, path.empty() ? "troupe" : "troupe " + path, CLI::AppFormatMode::Normal);
}

std::string command_line::help(const std::string& path) const {
  const CLI::App* app = find(path);
  return app ? help_of(app) : "";
}

args command_line::collect(const CLI::App& app) const {
  std::map<std::string, std::string> values;
  std::vector<std::string> positional;
  for (const CLI::Option* o : app.get_options()) {
    if (o == app.get_help_ptr() || o->count() == 0) continue;
    if (!o->nonpositional()) {
      positional = o->results();
      continue;
    }
    const std::string name = o->get_lnames().front();
    // A flag given twice is a mistake to name, not a choice to make silently (which --model?).
    if (o->count() > 1) throw input_error("--" + name + " is given twice");
    values[name] = o->get_items_expected_max() == 0 ? "1" : o->results().front();
  }
  for (const std::string& w : app.remaining()) {
    if (w == "--") continue;
    // A lone dash and negative numbers are values; any other "-x" is an option the command lacks.
    if (w.size() > 1 && w[0] == '-' && !std::isdigit(static_cast<unsigned char>(w[1]))) throw input_error("unknown option " + w);
    positional.push_back(w);
  }
  const text* t = text_of(&app);
  const int max = t ? t->max_positional : 0;
  if (max >= 0 && positional.size() > std::size_t(max)) throw input_error("unexpected argument '" + positional[std::size_t(max)] + "'");
  return args(std::move(values), std::move(positional));
}

int command_line::run(int argc, char** argv) {
  // `troupe help COMMAND...` is `troupe COMMAND... --help`.
  std::vector<char*> words(argv, argv + argc);
  static char help_flag[] = "--help";
  if (argc >= 2 && std::string(argv[1]) == "help") {
    words.erase(words.begin() + 1);
    words.push_back(help_flag);
  }
  const std::string first = words.size() > 1 ? words[1] : "";
  if (!first.empty() && first[0] != '-' && !find(first)) {
    std::fprintf(stderr, "troupe: unknown command '%s'\n\n%s", first.c_str(), help_of(root_.get()).c_str());
    return 2;
  }
  std::string named = first;
  try {
    try {
      root_->parse(int(words.size()), words.data());
    } catch (const CLI::CallForHelp&) {
      std::fputs(help_of(deepest(root_.get())).c_str(), stdout);
      return 0;
    }
    CLI::App* app = deepest(root_.get());
    named = path_of(app);
    const text* t = text_of(app);
    if (!t || !t->run) {  // troupe, or a group, named without one of its commands
      const auto rest = app->remaining();
      if (!rest.empty()) std::fprintf(stderr, "troupe %s: unknown command '%s'\n\n", named.c_str(), rest.front().c_str());
      std::fputs(help_of(app).c_str(), stderr);
      return 2;
    }
    return t->run(collect(*app));
  } catch (const CLI::ParseError& e) {  // a flag without its value, an unknown flag of troupe itself
    const std::string where = path_of(deepest(root_.get()));
    std::fprintf(stderr, "troupe%s: error: %s\n", where.empty() ? "" : (" " + where).c_str(), e.what());
    return 1;
  } catch (const input_error& e) {
    std::fprintf(stderr, "troupe %s: error: %s\n", named.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe %s: internal error: %s\n", named.c_str(), e.what());
    return 70;
  }
}

}  // namespace troupe::cli
