// Reading and writing the call-sequence CSV (replay_csv.h).
#include "replay_csv.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace arf::stress {
namespace {

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string item;
  std::stringstream ss(line);
  while (std::getline(ss, item, ',')) {
    while (!item.empty() && (item.back() == '\r' || item.back() == ' ')) item.pop_back();
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    out.push_back(item);
  }
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

int64_t to_int(const std::string& s) {
  size_t used = 0;
  const long long v = std::stoll(s, &used);
  if (used != s.size()) throw std::invalid_argument("not an integer");
  return v;
}

float to_float(const std::string& s) {
  size_t used = 0;
  const float v = std::stof(s, &used);
  if (used != s.size()) throw std::invalid_argument("not a number");
  return v;
}

class Row {
 public:
  Row(const std::map<std::string, size_t>& cols, const std::vector<std::string>& cells)
      : cols_(cols), cells_(cells) {}
  bool has(const char* name) const { return cols_.count(name) != 0; }
  const std::string& text(const char* name) const {
    current_ = name;
    return cells_.at(cols_.at(name));
  }
  int64_t integer(const char* name, int64_t fallback) const {
    return has(name) ? to_int(text(name)) : fallback;
  }
  bool flag(const char* name) const {
    const int64_t v = integer(name, 0);
    if (v != 0 && v != 1) throw std::invalid_argument("not 0 or 1");
    return v == 1;
  }
  const char* current() const { return current_; }

 private:
  const std::map<std::string, size_t>& cols_;
  const std::vector<std::string>& cells_;
  mutable const char* current_ = "";
};

CallSpec parse_row(const Row& r) {
  CallSpec c;
  c.index = static_cast<uint64_t>(r.integer("call", 0));
  c.token_kind = TokenKind::kReplayed;
  c.skipped = r.flag("skipped");
  const bool flat = r.flag("flat");
  const std::optional<Pat> p = pat_from_arf(static_cast<arfPattern_t>(r.integer("pattern", -1)), flat);
  if (!p) throw std::invalid_argument("unknown pattern (or flat with a non-allreduce pattern)");
  c.pattern = *p;
  if (r.has("algo")) {
    if (arfAlgorithmFromName(r.text("algo").c_str(), &c.algorithm) != arfSuccess) {
      throw std::invalid_argument("unknown algorithm");
    }
  }
  if (flat) c.algorithm = arfAlgoAuto;
  c.tokens = r.integer("tokens", 0);
  c.hidden = r.integer("hidden", 0);
  if (c.tokens < 1 || c.hidden < 8 || c.hidden % 8 != 0) throw std::invalid_argument("bad shape");
  if (flat) {
    c.flat_count = r.integer("flat_count", c.tokens * c.hidden);
    if (c.flat_count < 8 || c.flat_count % 8 != 0 || c.flat_count > c.tokens * c.hidden) {
      throw std::invalid_argument("flat_count: a multiple of 8 up to tokens * hidden");
    }
  }
  c.residual_in_place = r.flag("residual_in_place");
  c.norm_out_is_input = r.flag("norm_out_is_input");
  c.allreduce_out_is_input = r.flag("allreduce_out_is_input");
  c.per_rank_residual_gamma = r.flag("per_rank_residual_and_gamma");
  c.gamma_fp32 = r.flag("gamma_fp32");
  c.gamma_plus_one = r.flag("gamma_plus_one");
  c.residual_null = r.flag("residual_null");
  c.sandwich = r.flag("post_gamma");
  if (c.sandwich && !pat_has_norm(c.pattern)) throw std::invalid_argument("post_gamma with a pattern without a norm");
  if (c.residual_null) c.residual_in_place = false;
  if (r.has("eps")) c.eps = to_float(r.text("eps"));
  c.wait_after = !r.flag("issued_back_to_back");
  c.recorded_grid = static_cast<int>(r.integer("grid", 0));
  c.recorded_block = static_cast<int>(r.integer("block", 0));
  c.rounding = static_cast<arfNormRounding_t>(r.integer("norm_rounding", arfNormRoundOnce));
  c.layout = static_cast<arfScaleLayout_t>(r.integer("scale_layout", arfScaleRowMajor));
  c.format = static_cast<arfScaleFormat_t>(r.integer("scale_format", arfScaleFp32));
  c.fallback = static_cast<arfFallbackLevel_t>(r.integer("fallback", arfFallbackAuto));
  if (c.rounding < 0 || c.rounding > 1 || c.layout < 0 || c.layout > 2 || c.format < 0 ||
      c.format > 2 || c.fallback < 0 || c.fallback > 3) {
    throw std::invalid_argument("enum value out of range");
  }
  return c;
}

}  // namespace

bool parse_replay_csv(std::istream& in, ReplayFile* out, std::string* error) {
  std::string line;
  if (!std::getline(in, line)) {
    *error = "empty file";
    return false;
  }
  std::map<std::string, size_t> cols;
  const std::vector<std::string> header = split_csv(line);
  for (size_t i = 0; i < header.size(); ++i) cols[header[i]] = i;
  for (const char* required : {"pattern", "tokens", "hidden"}) {
    if (!cols.count(required)) {
      *error = std::string("header lacks the column '") + required + "'";
      return false;
    }
  }
  out->calls.clear();
  int line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line == "\r") continue;
    const std::vector<std::string> cells = split_csv(line);
    if (cells.size() != header.size()) {
      *error = "line " + std::to_string(line_no) + ": " + std::to_string(cells.size()) +
               " cells, header has " + std::to_string(header.size());
      return false;
    }
    const Row row(cols, cells);
    try {
      out->calls.push_back(parse_row(row));
    } catch (const std::exception& e) {
      *error = "line " + std::to_string(line_no) + ", column '" + row.current() + "': " + e.what();
      return false;
    }
  }
  if (out->calls.empty()) {
    *error = "no calls";
    return false;
  }
  return true;
}

bool load_replay_csv(const std::string& path, ReplayFile* out, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot open " + path;
    return false;
  }
  if (!parse_replay_csv(in, out, error)) {
    *error = path + ": " + *error;
    return false;
  }
  return true;
}

std::string replay_csv_header() {
  return "call,skipped,pattern,flat,algo,tokens,hidden,residual_in_place,norm_out_is_input,"
         "allreduce_out_is_input,per_rank_residual_and_gamma,gamma_fp32,gamma_plus_one,eps,"
         "issued_back_to_back,grid,block,residual_null,norm_rounding,scale_layout,scale_format,"
         "fallback,flat_count,post_gamma";
}

std::string replay_csv_row(const CallSpec& c) {
  char eps[32];
  std::snprintf(eps, sizeof(eps), "%.9g", static_cast<double>(c.eps));
  std::ostringstream o;
  o << c.index << ',' << (c.skipped ? 1 : 0) << ',' << static_cast<int>(to_arf_pattern(c.pattern))
    << ',' << (c.pattern == Pat::kFlat ? 1 : 0) << ',' << arfAlgorithmName(c.algorithm) << ','
    << c.tokens << ',' << c.hidden << ',' << c.residual_in_place << ',' << c.norm_out_is_input
    << ',' << c.allreduce_out_is_input << ',' << c.per_rank_residual_gamma << ',' << c.gamma_fp32
    << ',' << c.gamma_plus_one << ',' << eps << ',' << (c.wait_after ? 0 : 1) << ','
    << c.plan_grid << ',' << c.plan_block << ',' << c.residual_null << ','
    << static_cast<int>(c.rounding) << ',' << static_cast<int>(c.layout) << ','
    << static_cast<int>(c.format) << ',' << static_cast<int>(c.fallback) << ',' << c.flat_count << ',' << c.sandwich;
  return o.str();
}

}  // namespace arf::stress
