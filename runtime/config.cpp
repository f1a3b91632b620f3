#include "runtime/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "jit/ir/diagnostics.h"

namespace tessera::config {

namespace {

// The accepted words of the choice and list variables. TESSERA_DUMP_IR's pass names must match
// passes::pass_names() (tests/lowering/lowering_test.cpp checks it: the runtime cannot see the passes).
constexpr std::string_view dump_ir_values[] = {"0", "1", "all", "canonicalize", "expand_pipelines", "fuse_dot_accumulate",
                                              "check_vmem_budget"};
constexpr std::string_view log_topics[] = {"cache", "all"};
constexpr std::string_view dma_values[] = {"auto", "eager", "worker"};
// Must match the LLVM backend's target names (jit/llvm/target.h; tests/dsl/target_test.cpp checks it).
constexpr std::string_view target_values[] = {"native", "avx2", "avx512", "avx512_bf16", "amx"};

// The one table. The doc lines are README.md's "effect" column.
constexpr std::array<Variable, var_count> table{{
    {.var = Var::dump_ir, .name = "TESSERA_DUMP_IR", .kind = Kind::choice, .default_value = "0",
     .choices = dump_ir_values,
     .doc = "print each kernel's IR (stderr): as traced (`1`), after the named pass, or after every pass (`all`)"},
    {.var = Var::time_passes, .name = "TESSERA_TIME_PASSES", .kind = Kind::flag, .default_value = "0",
     .doc = "print how long each lowering pass took"},
    {.var = Var::dump_llvm, .name = "TESSERA_DUMP_LLVM", .kind = Kind::flag, .default_value = "0",
     .doc = "print the optimised LLVM IR of each kernel compiled (not of cache hits)"},
    {.var = Var::log, .name = "TESSERA_LOG", .kind = Kind::list, .choices = log_topics,
     .doc = "`cache`: say where each compiled kernel came from (memory, disk, compiler) and how long it took"},
    {.var = Var::interpret, .name = "TESSERA_INTERPRET", .kind = Kind::flag, .default_value = "0",
     .doc = "calls made while it is `1` run in the interpreter"},
    {.var = Var::check_against_interpreter, .name = "TESSERA_CHECK_AGAINST_INTERPRETER", .kind = Kind::flag,
     .default_value = "0",
     .doc = "compiled calls made while it is `1` also run in the interpreter and throw `tessera::MismatchError` "
            "where the outputs differ (`CallOptions::check_against_interpreter`)"},
    {.var = Var::detect_races, .name = "TESSERA_DETECT_RACES", .kind = Kind::flag, .default_value = "0",
     .doc = "interpreted calls made while it is `1` detect races (`InterpretParams::detect_races`), reported on stderr "
            "and by `pl::race_reports()`"},
    {.var = Var::num_threads, .name = "TESSERA_NUM_THREADS", .kind = Kind::integer, .min = 1, .max = 4096,
     .doc = "threads for compiled kernels; unset: one per hardware thread (`pl::set_num_threads` overrides)"},
    {.var = Var::dma, .name = "TESSERA_DMA", .kind = Kind::choice, .default_value = "auto", .choices = dma_values,
     .doc = "how compiled kernels run copies: on the DMA worker thread when a core is idle (`auto`), at once, or on "
            "the worker (`pl::set_dma_execution` overrides)"},
    {.var = Var::chaos_us, .name = "TESSERA_CHAOS_US", .kind = Kind::integer, .default_value = "0", .min = 0,
     .max = 10'000'000, .doc = "delay collective launches and remote operations at random, by up to n us"},
    {.var = Var::trace, .name = "TESSERA_TRACE", .kind = Kind::text, .placeholder = "a file path",
     .doc = "record a timeline of the whole run, written to that file at exit"},
    {.var = Var::cache_dir, .name = "TESSERA_CACHE_DIR", .kind = Kind::text, .placeholder = "a directory",
     .doc = "where compiled kernels are cached on disk; unset: `$XDG_CACHE_HOME/tessera`, else `~/.cache/tessera`"},
    {.var = Var::cache, .name = "TESSERA_CACHE", .kind = Kind::flag, .default_value = "1",
     .doc = "`0` turns the disk cache of compiled kernels off"},
    {.var = Var::target, .name = "TESSERA_TARGET", .kind = Kind::choice, .default_value = "native",
     .choices = target_values,
     .doc = "the CPU target kernels are compiled for, read when a call first compiles a kernel for its argument "
            "signature (`CompilerParams::target` overrides)"},
    // Read by tests/support/golden.h with getenv: the IR layer's tests do not link the runtime.
    {.var = Var::update_golden, .name = "TESSERA_UPDATE_GOLDEN", .kind = Kind::flag, .default_value = "0",
     .doc = "tests: rewrite the golden IR files in tests/golden from the actual output"},
    {.var = Var::exhaustive, .name = "TESSERA_EXHAUSTIVE", .kind = Kind::flag, .default_value = "0",
     .doc = "tests: also check f32 sin and cos against libm over every float (minutes)"},
}};

constexpr bool table_in_order() {
  for (size_t i = 0; i < table.size(); ++i)
    if (static_cast<size_t>(table[i].var) != i) return false;
  return true;
}
static_assert(table_in_order(), "the rows of the table must follow the order of Var");

// A parsed value, of whichever kind the variable is.
struct Value {
  bool flag = false;
  std::optional<int64_t> number;
  std::string_view word;                // choice: the table's spelling
  std::vector<std::string_view> items;  // list: the table's spellings
  std::string text;
};

std::string code_list(std::span<const std::string_view> words) {
  std::string s;
  for (std::string_view w : words) s += fmt::format("{}`{}`", s.empty() ? "" : ", ", w);
  return s;
}

thread_local SourceLoc t_call_site;

[[noreturn]] void invalid(const Variable& v, std::string_view given, std::string_view why = {}) {
  std::string fix = fmt::format("set {} to {}, or unset it", v.name, accepted_values(v));
  if (!v.default_value.empty()) fix += fmt::format(" (default {})", v.default_value);
  throw UserError(fmt::format("the environment variable {} has a value tessera does not accept{}{}", v.name,
                              why.empty() ? "" : ": ", why),
                  fmt::format("{}={}", v.name, given), std::move(fix), call_site());
}

std::optional<std::string_view> match(std::span<const std::string_view> words, std::string_view s) {
  for (std::string_view w : words)
    if (w == s) return w;
  return std::nullopt;
}

// Parses `s`, the variable's text: never the default, whose meaning `unset` gives.
Value parse(const Variable& v, std::string_view s) {
  Value out;
  switch (v.kind) {
    case Kind::flag: {
      std::string lower(s);
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (lower == "1" || lower == "true" || lower == "on" || lower == "yes") out.flag = true;
      else if (lower.empty() || lower == "0" || lower == "false" || lower == "off" || lower == "no") out.flag = false;
      else invalid(v, s);
      return out;
    }
    case Kind::integer: {
      int64_t n = 0;
      const char* end = s.data() + s.size();
      auto [p, ec] = std::from_chars(s.data(), end, n);
      if (s.empty() || ec == std::errc::invalid_argument || p != end) invalid(v, s, "not an integer");
      if (ec == std::errc::result_out_of_range || n < v.min || n > v.max) invalid(v, s, "out of range");
      out.number = n;
      return out;
    }
    case Kind::choice: {
      std::optional<std::string_view> w = match(v.choices, s);
      if (!w) invalid(v, s);
      out.word = *w;
      return out;
    }
    case Kind::list: {
      size_t start = 0;
      while (start <= s.size()) {
        size_t comma = std::min(s.find(',', start), s.size());
        std::string_view item = s.substr(start, comma - start);
        std::optional<std::string_view> w = match(v.choices, item);
        if (!w) invalid(v, s, item.empty() ? "an empty item" : fmt::format("`{}` is not one of them", item));
        out.items.push_back(*w);
        start = comma + 1;
      }
      return out;
    }
    case Kind::text:
      out.text = std::string(s);
      return out;
  }
  return out;
}

// The value when the variable is unset. The defaults are the table's own, so they parse.
Value unset(const Variable& v) {
  if (!v.default_value.empty()) return parse(v, v.default_value);
  return {};
}

// The last text seen of each variable and its parse, so a value is parsed once. Built on first use
// (a function-local static), so readers running in static initialisers find it ready.
struct Slot {
  std::mutex mutex;
  bool parsed = false;
  std::optional<std::string> raw;
  Value value;
};

Slot& slot(Var v) {
  static std::array<Slot, var_count> slots;
  return slots[static_cast<size_t>(v)];
}

// Runs f on the variable's current value, under its slot's lock.
template <class F>
auto with_value(Var var, Kind kind, F f) {
  const Variable& v = variable(var);
  if (v.kind != kind) throw InternalError("config", fmt::format("{} is not read as the kind it is declared", v.name));
  const char* raw = std::getenv(v.name);
  Slot& s = slot(var);
  std::lock_guard lock(s.mutex);
  const bool same = s.parsed && (raw ? s.raw && *s.raw == raw : !s.raw);
  if (!same) {
    // For every kind but flags an empty value is the default: `TESSERA_DMA= prog` is how a shell
    // clears a variable. An empty flag is false, as it always was.
    const bool use_default = !raw || (*raw == '\0' && kind != Kind::flag);
    Value value = use_default ? unset(v) : parse(v, raw);  // throws before anything is kept
    s.value = std::move(value);
    s.raw = raw ? std::optional<std::string>(raw) : std::nullopt;
    s.parsed = true;
  }
  return f(s.value);
}

}  // namespace

CallSite::CallSite(SourceLoc loc) : previous_(t_call_site) { t_call_site = loc; }
CallSite::~CallSite() { t_call_site = previous_; }
SourceLoc call_site() { return t_call_site; }

std::span<const Variable> variables() { return table; }
const Variable& variable(Var v) { return table[static_cast<size_t>(v)]; }

const Variable* find(std::string_view name) {
  for (const Variable& v : table)
    if (name == v.name) return &v;
  return nullptr;
}

std::string accepted_values(const Variable& v) {
  switch (v.kind) {
    case Kind::flag: return "one of 1, true, on, yes, 0, false, off, no";
    case Kind::integer: return fmt::format("an integer from {} to {}", v.min, v.max);
    case Kind::choice: return fmt::format("one of {}", fmt::join(v.choices, ", "));
    case Kind::list: return fmt::format("a comma-separated list of {}", fmt::join(v.choices, ", "));
    case Kind::text: return std::string(v.placeholder);
  }
  return {};
}

std::string readme_table() {
  std::string s = "| variable | values | effect |\n|---|---|---|\n";
  for (const Variable& v : table) {
    std::string values;
    switch (v.kind) {
      case Kind::flag: values = "`1` or `0`"; break;
      case Kind::integer: values = fmt::format("n from {} to {}", v.min, v.max); break;
      case Kind::choice: values = code_list(v.choices); break;
      case Kind::list: values = code_list(v.choices) + ", comma-separated"; break;
      case Kind::text: values = std::string(v.placeholder); break;
    }
    if (!v.default_value.empty()) values += fmt::format(" (default `{}`)", v.default_value);
    s += fmt::format("| `{}` | {} | {} |\n", v.name, values, v.doc);
  }
  return s;
}

bool flag(Var v) {
  return with_value(v, Kind::flag, [](const Value& x) { return x.flag; });
}
std::optional<int64_t> integer(Var v) {
  return with_value(v, Kind::integer, [](const Value& x) { return x.number; });
}
std::string_view choice(Var v) {
  return with_value(v, Kind::choice, [](const Value& x) { return x.word; });
}
bool listed(Var v, std::string_view item) {
  return with_value(v, Kind::list, [&](const Value& x) {
    return std::find(x.items.begin(), x.items.end(), item) != x.items.end() ||
           std::find(x.items.begin(), x.items.end(), "all") != x.items.end();
  });
}
std::string text(Var v) {
  return with_value(v, Kind::text, [](const Value& x) { return x.text; });
}

std::string_view dump_ir() { return choice(Var::dump_ir); }
bool time_passes() { return flag(Var::time_passes); }
bool dump_llvm() { return flag(Var::dump_llvm); }
bool log_enabled(std::string_view topic) { return listed(Var::log, topic); }
bool interpret() { return flag(Var::interpret); }
bool check_against_interpreter() { return flag(Var::check_against_interpreter); }
bool detect_races() { return flag(Var::detect_races); }
std::optional<int> num_threads() {
  std::optional<int64_t> n = integer(Var::num_threads);
  return n ? std::optional<int>(static_cast<int>(*n)) : std::nullopt;
}
std::string_view dma() { return choice(Var::dma); }
int64_t chaos_us() { return integer(Var::chaos_us).value_or(0); }
std::string trace_path() { return text(Var::trace); }
std::string cache_dir() { return text(Var::cache_dir); }
bool disk_cache() { return flag(Var::cache); }
std::string target() { return std::string(choice(Var::target)); }

}  // namespace tessera::config
