// Cross-rank hash comparison and the per-rank hash files (cross_rank.h).
#include "cross_rank.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace arf::stress {
namespace {

constexpr char kMagic[8] = {'A', 'R', 'F', 'S', 'T', 'R', 'S', '1'};

struct FileHeader {
  char magic[8];
  int32_t rank, world, repeat, pad;
  uint64_t issued, first_lost, slots;
};

}  // namespace

CrossRankResult compare_tables(const std::vector<std::vector<TableEntry>>& tables, uint64_t issued,
                               uint64_t limit) {
  CrossRankResult r;
  if (tables.empty()) return r;
  const uint64_t slots = tables[0].size();
  for (const auto& t : tables) {
    if (t.size() != slots) {
      r.error = "tables of different sizes";
      return r;
    }
  }
  if (slots == 0) return r;
  r.folded = issued > slots;
  const uint64_t end = std::min(issued, slots);
  for (uint64_t s = 0; s < end; ++s) {
    const uint64_t last = s + ((issued - 1 - s) / slots) * slots;  // the slot's latest call
    if (last >= limit) continue;
    const TableEntry& ref = tables[0][s];
    const bool ref_comparable = (ref.flags & kSlotComparable) != 0;
    bool differs = false;
    int first = -1;
    for (size_t k = 0; k < tables.size() && !differs; ++k) {
      const TableEntry& e = tables[k][s];
      if ((e.flags & kSlotChecked) == 0 || e.flags != ref.flags ||
          (ref_comparable && e.hash != ref.hash)) {
        differs = true;
        first = static_cast<int>(k);
      }
    }
    if (!ref_comparable && !differs) continue;
    ++r.compared;
    if (differs) {
      if (r.mismatched == 0) {
        r.first_slot = static_cast<int64_t>(s);
        r.first_rank = first;
      }
      ++r.mismatched;
    }
  }
  return r;
}

std::string hash_file_path(const std::string& dir, int repeat, int rank) {
  return dir + "/rep" + std::to_string(repeat) + ".rank" + std::to_string(rank) + ".bin";
}

std::string write_rank_table(const std::string& dir, const RankTable& t) {
  const std::string path = hash_file_path(dir, t.repeat, t.rank);
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return "cannot create " + tmp + ": " + std::strerror(errno);
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.rank = t.rank;
  h.world = t.world;
  h.repeat = t.repeat;
  h.issued = t.issued;
  h.first_lost = t.first_lost;
  h.slots = t.table.size();
  bool ok = std::fwrite(&h, sizeof(h), 1, f) == 1;
  if (ok && !t.table.empty()) ok = std::fwrite(t.table.data(), sizeof(TableEntry), t.table.size(), f) == t.table.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return "cannot write " + tmp;
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return "cannot rename " + tmp + ": " + std::strerror(errno);
  return "";
}

std::string read_rank_table(const std::string& path, RankTable* t) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return "cannot open " + path;
  FileHeader h{};
  std::string why;
  if (std::fread(&h, sizeof(h), 1, f) != 1 || std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
    why = path + ": not a hash file of arfusion-stress";
  } else {
    t->rank = h.rank;
    t->world = h.world;
    t->repeat = h.repeat;
    t->issued = h.issued;
    t->first_lost = h.first_lost;
    t->table.assign(h.slots, TableEntry{});
    if (h.slots > 0 && std::fread(t->table.data(), sizeof(TableEntry), h.slots, f) != h.slots) {
      why = path + ": truncated";
    }
  }
  std::fclose(f);
  return why;
}

CrossRankResult exchange_and_compare(const std::string& dir, const RankTable& mine, double seconds) {
  CrossRankResult r;
  std::vector<RankTable> all(static_cast<size_t>(mine.world));
  all[static_cast<size_t>(mine.rank)] = mine;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int peer = 0; peer < mine.world; ++peer) {
    if (peer == mine.rank) continue;
    const std::string path = hash_file_path(dir, mine.repeat, peer);
    while (true) {
      FILE* probe = std::fopen(path.c_str(), "rb");
      if (probe != nullptr) {
        std::fclose(probe);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        r.error = "rank " + std::to_string(peer) + "'s hash file " + path + " did not appear";
        return r;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (std::string why = read_rank_table(path, &all[static_cast<size_t>(peer)]); !why.empty()) {
      r.error = why;
      return r;
    }
    std::remove(path.c_str());
  }
  // Ranks of different processes may stop a few calls apart after an error: compare what all of
  // them completed (below every first lost call and every rank's issued count).
  uint64_t limit = UINT64_MAX, issued_max = 0;
  std::vector<std::vector<TableEntry>> tables;
  for (const RankTable& t : all) {
    limit = std::min({limit, t.first_lost, t.issued});
    issued_max = std::max(issued_max, t.issued);
    tables.push_back(t.table);
  }
  return compare_tables(tables, issued_max, limit);
}

}  // namespace arf::stress
