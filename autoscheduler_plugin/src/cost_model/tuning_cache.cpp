// The per-user SQLite cache of timings and measured schedules (see tuning_cache.h).
#include "hkfac/cost_model/tuning_cache.h"

#include <sqlite3.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "hkfac/error.h"

namespace hkfac::cost_model {

namespace {

constexpr int kSchemaVersion = 1;

// mkdir -p, mode 0700: the cache holds the user's pipelines.
void make_dirs(const std::string &dir) {
  std::string at;
  size_t i = 0;
  while (i <= dir.size()) {
    const size_t slash = dir.find('/', i);
    const size_t end = slash == std::string::npos ? dir.size() : slash;
    at = dir.substr(0, end);
    if (!at.empty() && mkdir(at.c_str(), 0700) != 0 && errno != EEXIST)
      throw Error("the cache directory \"" + dir + "\" cannot be created (" + at + ": " +
                  std::strerror(errno) + "); set HKFAC_CACHE_DIR elsewhere or to off");
    if (slash == std::string::npos)
      break;
    i = slash + 1;
  }
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A prepared statement, finalized on scope exit.
class Statement {
public:
  Statement(sqlite3 *db, const char *sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK)
      throw Error(std::string("the tuning cache: ") + sqlite3_errmsg(db) + " in: " + sql);
  }
  ~Statement() { sqlite3_finalize(st_); }
  Statement &text(int i, const std::string &s) {
    sqlite3_bind_text(st_, i, s.c_str(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement &real(int i, double x) {
    sqlite3_bind_double(st_, i, x);
    return *this;
  }
  Statement &integer(int i, int64_t x) {
    sqlite3_bind_int64(st_, i, x);
    return *this;
  }
  Statement &blob(int i, const std::vector<uint8_t> &b) {
    sqlite3_bind_blob(st_, i, b.data(), static_cast<int>(b.size()), SQLITE_TRANSIENT);
    return *this;
  }
  // True while there is a row.
  bool step() {
    const int r = sqlite3_step(st_);
    if (r == SQLITE_ROW)
      return true;
    if (r != SQLITE_DONE)
      throw Error(std::string("the tuning cache: ") + sqlite3_errmsg(db_));
    return false;
  }
  std::string col_text(int i) {
    const unsigned char *t = sqlite3_column_text(st_, i);
    return t ? reinterpret_cast<const char *>(t) : "";
  }
  double col_real(int i) { return sqlite3_column_double(st_, i); }
  int64_t col_int(int i) { return sqlite3_column_int64(st_, i); }
  std::vector<uint8_t> col_blob(int i) {
    const auto *p = static_cast<const uint8_t *>(sqlite3_column_blob(st_, i));
    return p ? std::vector<uint8_t>(p, p + sqlite3_column_bytes(st_, i)) : std::vector<uint8_t>{};
  }

private:
  sqlite3 *db_;
  sqlite3_stmt *st_ = nullptr;
};

} // namespace

TuningCache::TuningCache(const std::string &dir) {
  make_dirs(dir);
  path_ = dir + "/hkfac-cache.sqlite";
  if (sqlite3_open_v2(path_.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error("the tuning cache \"" + path_ + "\" cannot be opened: " + why);
  }
  // Generators of a parallel build take turns writing; none gives up within half a minute.
  sqlite3_busy_timeout(db_, 30000);
  try {
    // WAL: readers never wait for the writer, and a killed writer's transaction rolls back.
    // The journal mode needs the lock briefly, so a busy database is retried.
    for (int attempt = 0;; ++attempt) {
      try {
        exec("PRAGMA journal_mode=WAL");
        break;
      } catch (const Error &) {
        if (attempt >= 50)
          throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    exec("PRAGMA synchronous=NORMAL");
    exec("BEGIN IMMEDIATE");
    exec("CREATE TABLE IF NOT EXISTS pipelines("
         " key TEXT PRIMARY KEY, name TEXT, target TEXT, machine_params TEXT, host TEXT,"
         " funcs INTEGER, stages INTEGER, encoded TEXT, source TEXT, ms REAL, model_ms REAL,"
         " origin TEXT, measurements INTEGER, updated TEXT)");
    exec("CREATE TABLE IF NOT EXISTS samples("
         " pipeline TEXT, schedule TEXT, host TEXT, target TEXT, features_version INTEGER,"
         " stages INTEGER, featurization BLOB, ms REAL, created TEXT,"
         " PRIMARY KEY(pipeline, schedule, host))");
    exec("CREATE INDEX IF NOT EXISTS samples_by_host ON samples(host, features_version)");
    exec("CREATE TABLE IF NOT EXISTS corrections("
         " id TEXT PRIMARY KEY, samples INTEGER, blob BLOB, note TEXT, created TEXT)");
    Statement version(db_, "PRAGMA user_version");
    const int64_t v = version.step() ? version.col_int(0) : 0;
    if (v != 0 && v != kSchemaVersion)
      throw Error("the tuning cache \"" + path_ + "\" has schema version " + std::to_string(v) +
                  ", this plugin writes " + std::to_string(kSchemaVersion) +
                  " (`hkfac_cache clear` starts it afresh)");
    exec(("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

TuningCache::~TuningCache() {
  if (db_)
    sqlite3_close(db_);
}

void TuningCache::exec(const char *sql) {
  char *err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string why = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw Error("the tuning cache \"" + path_ + "\": " + why);
  }
}

std::optional<TuningCache::Schedule> TuningCache::best_schedule(const std::string &key) {
  Statement q(db_, "SELECT encoded, source, ms, model_ms, origin, updated FROM pipelines "
                   "WHERE key = ? AND encoded IS NOT NULL");
  q.text(1, key);
  if (!q.step())
    return std::nullopt;
  Schedule s;
  s.encoded = q.col_text(0);
  s.source = q.col_text(1);
  s.ms = q.col_real(2);
  s.model_ms = q.col_real(3);
  s.origin = q.col_text(4);
  s.updated = q.col_text(5);
  return s;
}

void TuningCache::record(const PipelineInfo &p, const Schedule &best,
                         const std::vector<Sample> &samples) {
  const std::string when = now_utc();
  exec("BEGIN IMMEDIATE");
  try {
    Statement up(db_,
                 "INSERT INTO pipelines(key, name, target, machine_params, host, funcs, stages,"
                 " encoded, source, ms, model_ms, origin, measurements, updated)"
                 " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 1, ?13)"
                 " ON CONFLICT(key) DO UPDATE SET measurements = measurements + 1,"
                 "  encoded = CASE WHEN excluded.ms < ms THEN excluded.encoded ELSE encoded END,"
                 "  source = CASE WHEN excluded.ms < ms THEN excluded.source ELSE source END,"
                 "  origin = CASE WHEN excluded.ms < ms THEN excluded.origin ELSE origin END,"
                 "  model_ms = CASE WHEN excluded.ms < ms THEN excluded.model_ms ELSE model_ms END,"
                 "  updated = CASE WHEN excluded.ms < ms THEN excluded.updated ELSE updated END,"
                 "  ms = min(ms, excluded.ms)");
    up.text(1, p.key).text(2, p.name).text(3, p.target).text(4, p.machine_params).text(5, p.host);
    up.integer(6, p.funcs).integer(7, p.stages).text(8, best.encoded).text(9, best.source);
    up.real(10, best.ms).real(11, best.model_ms).text(12, best.origin).text(13, when);
    up.step();
    for (const Sample &s : samples) {
      Statement ins(db_, "INSERT INTO samples(pipeline, schedule, host, target,"
                         " features_version, stages, featurization, ms, created)"
                         " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
                         " ON CONFLICT(pipeline, schedule, host) DO UPDATE SET"
                         "  ms = min(ms, excluded.ms)");
      ins.text(1, s.pipeline).text(2, s.schedule).text(3, s.host).text(4, s.target);
      ins.integer(5, s.features_version).integer(6, s.stages).blob(7, s.featurization);
      ins.real(8, s.ms).text(9, when);
      ins.step();
    }
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::vector<TuningCache::Sample> TuningCache::samples(const std::string &host,
                                                      int features_version) {
  Statement q(db_, "SELECT pipeline, schedule, host, target, features_version, stages,"
                   " featurization, ms FROM samples WHERE host = ? AND features_version = ?"
                   " ORDER BY rowid");
  q.text(1, host).integer(2, features_version);
  std::vector<Sample> out;
  while (q.step()) {
    Sample s;
    s.pipeline = q.col_text(0);
    s.schedule = q.col_text(1);
    s.host = q.col_text(2);
    s.target = q.col_text(3);
    s.features_version = static_cast<int>(q.col_int(4));
    s.stages = static_cast<int>(q.col_int(5));
    s.featurization = q.col_blob(6);
    s.ms = q.col_real(7);
    out.push_back(std::move(s));
  }
  return out;
}

int64_t TuningCache::sample_count(const std::string &host, int features_version) {
  Statement q(db_, "SELECT count(*) FROM samples WHERE host = ? AND features_version = ?");
  q.text(1, host).integer(2, features_version);
  return q.step() ? q.col_int(0) : 0;
}

std::optional<TuningCache::Correction> TuningCache::correction(const std::string &id) {
  Statement q(db_, "SELECT samples, blob, note FROM corrections WHERE id = ?");
  q.text(1, id);
  if (!q.step())
    return std::nullopt;
  Correction c;
  c.samples = q.col_int(0);
  c.blob = q.col_blob(1);
  c.note = q.col_text(2);
  return c;
}

void TuningCache::put_correction(const std::string &id, int64_t samples,
                                 const std::vector<uint8_t> &blob, const std::string &note) {
  Statement q(db_, "INSERT OR REPLACE INTO corrections(id, samples, blob, note, created)"
                   " VALUES(?1, ?2, ?3, ?4, ?5)");
  q.text(1, id).integer(2, samples).blob(3, blob).text(4, note).text(5, now_utc());
  q.step();
}

std::vector<TuningCache::Row> TuningCache::pipelines() {
  Statement q(db_, "SELECT p.key, p.name, p.target, p.machine_params, p.host, p.funcs, p.stages,"
                   " p.ms, p.model_ms, p.origin, p.updated,"
                   " (SELECT count(*) FROM samples s WHERE s.pipeline = p.key)"
                   " FROM pipelines p ORDER BY p.updated");
  std::vector<Row> out;
  while (q.step()) {
    Row r;
    r.info.key = q.col_text(0);
    r.info.name = q.col_text(1);
    r.info.target = q.col_text(2);
    r.info.machine_params = q.col_text(3);
    r.info.host = q.col_text(4);
    r.info.funcs = static_cast<int>(q.col_int(5));
    r.info.stages = static_cast<int>(q.col_int(6));
    r.best.ms = q.col_real(7);
    r.best.model_ms = q.col_real(8);
    r.best.origin = q.col_text(9);
    r.best.updated = q.col_text(10);
    r.samples = q.col_int(11);
    out.push_back(std::move(r));
  }
  return out;
}

TuningCache::Totals TuningCache::totals() {
  Totals t;
  Statement a(db_, "SELECT (SELECT count(*) FROM pipelines), (SELECT count(*) FROM samples),"
                   " (SELECT count(*) FROM corrections)");
  if (a.step()) {
    t.pipelines = a.col_int(0);
    t.samples = a.col_int(1);
    t.corrections = a.col_int(2);
  }
  struct stat st {};
  if (stat(path_.c_str(), &st) == 0)
    t.bytes = st.st_size;
  return t;
}

void TuningCache::clear() {
  exec("BEGIN IMMEDIATE");
  try {
    exec("DELETE FROM pipelines");
    exec("DELETE FROM samples");
    exec("DELETE FROM corrections");
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  exec("VACUUM");
}

std::string TuningCache::host_id() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return model + ", " + std::to_string(cores) + " cores";
}

} // namespace hkfac::cost_model
