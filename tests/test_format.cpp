// File format 2 and the upgrade of format-1 files. A format-1 file made by the
// last q that wrote format 1 (tests/fixtures/make-format1.sh) is read as it is
// by read-only operations, then upgraded in place by its first write, with its
// messages, leases, dead letters, dedup and done entries and counters intact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "libq/error.hpp"
#include "libq/lmdb/broker.hpp"
#include "libq/lmdb/records.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace q;
using q::testing::poke;
using q::testing::TempDir;

namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The raw value of a meta key, read with LMDB directly (the file closed).
std::string meta_value(const std::string& path, const char* key) {
  std::string value;
  poke(path, "meta", [&](MDB_txn* txn, MDB_dbi dbi) {
    MDB_val k{std::strlen(key), const_cast<char*>(key)}, v;
    if (mdb_get(txn, dbi, &k, &v) == 0) value.assign(static_cast<char*>(v.mv_data), v.mv_size);
  });
  return value;
}

std::uint32_t file_format(const std::string& path) {
  return store::decode_format(meta_value(path, "q-format")).value_or(0);
}

struct Leased {
  std::string queue, receipt, body;
};

std::vector<Leased> fixture_receipts() {
  std::ifstream in(std::string(Q_FIXTURES) + "/format1.receipts");
  std::vector<Leased> all;
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(' '), b = line.find(' ', a + 1);
    all.push_back({line.substr(0, a), line.substr(a + 1, b - a - 1), line.substr(b + 1)});
  }
  return all;
}

// Everything a reader sees of a file, as text, to compare before and after.
std::string everything(Broker& broker) {
  std::ostringstream out;
  for (const auto& s : broker.stats("")) {
    const auto& c = s.counters;
    out << s.name << " visible " << s.visible << " in_flight " << s.in_flight << " delayed "
        << s.delayed << " dead " << s.dead << " groups " << s.groups << "/" << s.held_groups
        << " counters " << c.sent << " " << c.received << " " << c.acked << " " << c.nacked << " "
        << c.dead_lettered << " " << c.redriven << " " << c.expired << " " << c.deduplicated << " "
        << c.stale_acks << "\n";
    broker.export_messages(s.name, [&](const Message& m) {
      out << "  " << m.id << " " << to_string(m.state) << " " << m.body << " rc " << m.receive_count
          << " reason '" << m.reason << "' dedup '" << m.dedup_id << "' group '" << m.group
          << "' visible_at " << m.visible_at << "\n";
    });
  }
  return out.str();
}

class FormatTest : public ::testing::Test {
 protected:
  std::unique_ptr<Broker> open() {
    LmdbOptions options;
    options.open.path = path_;
    options.open.durable = false;
    options.clock = &clock_;
    options.random = [] { return 7u; };
    return open_lmdb_broker(options);
  }

  // A copy of the fixture, and the clock a minute after it was made.
  void use_fixture() {
    fs::copy_file(std::string(Q_FIXTURES) + "/format1.q", path_);
    Millis made = 0;
    for (const auto& s : open()->stats("")) made = std::max(made, s.created_at);
    ASSERT_GT(made, 0);
    clock_.set(made + kMinute);
  }

  TempDir dir_;
  std::string path_ = dir_.file("q.q");
  FakeClock clock_;
};

TEST_F(FormatTest, Format1FixtureIsReadAsItIsThenUpgradedByTheFirstWrite) {
  use_fixture();
  const std::string original = file_bytes(path_);
  ASSERT_EQ(file_format(path_), 1u);
  const auto leased = fixture_receipts();
  ASSERT_EQ(leased.size(), 2u);

  std::string seen;
  {
    auto broker = open();
    seen = everything(*broker);
    EXPECT_TRUE(broker->verify().empty());
    EXPECT_EQ(broker->peek("jobs", 10).size(), 4u);
    EXPECT_TRUE(broker->is_done("tasks", "task-a"));
    EXPECT_FALSE(broker->is_done("tasks", "task-c"));
    EXPECT_EQ(broker->dead_letters("mail", 10).size(), 2u);
  }
  // The fixture holds what the upgrade must carry over.
  for (const char* want : {"jobs visible 2 in_flight 1 delayed 1 dead 0",
                           "mail visible 1 in_flight 0 delayed 0 dead 2",
                           "orders visible 2 in_flight 1 delayed 0 dead 0 groups 2/1",
                           "reason 'smtp 550 no such user'", "reason 'smtp 421 try later'",
                           "reason 'try again'", "dedup 'order-1'", "dedup 'o-1'"})
    EXPECT_NE(seen.find(want), std::string::npos) << want << "\nin:\n" << seen;
  // Reading wrote nothing: the file is still format 1, byte for byte.
  EXPECT_EQ(file_bytes(path_), original);

  {
    auto broker = open();
    // The first write: acking the lease of the fixture upgrades the file.
    auto jobs =
        std::find_if(leased.begin(), leased.end(), [](auto& l) { return l.queue == "jobs"; });
    auto acked = broker->ack("jobs", {jobs->receipt});
    ASSERT_EQ(acked.size(), 1u);
    EXPECT_EQ(acked[0].outcome, ReceiptOutcome::Done) << acked[0].detail;
  }
  EXPECT_EQ(file_format(path_), store::kFormatVersion);
  EXPECT_TRUE(store::decode_meta_number(meta_value(path_, "next-seq")).has_value());
  EXPECT_TRUE(store::decode_meta_number(meta_value(path_, "next-qid")).has_value());

  auto broker = open();
  EXPECT_TRUE(broker->verify().empty());
  // Everything else is as it was: only the acked message and its counter moved.
  std::string expected = seen;
  auto erase_line_with = [&](const std::string& text) {
    auto at = expected.find(text);
    ASSERT_NE(at, std::string::npos);
    auto start = expected.rfind('\n', at) + 1;
    expected.erase(start, expected.find('\n', at) + 1 - start);
  };
  erase_line_with(" in_flight job one ");
  std::string after = everything(*broker);
  auto jobs_line = after.substr(0, after.find('\n'));
  EXPECT_NE(jobs_line.find("in_flight 0"), std::string::npos) << jobs_line;
  // Lines other than the jobs queue's summary are unchanged.
  EXPECT_EQ(after.substr(after.find('\n')), expected.substr(expected.find('\n')));

  // The FIFO lease is still valid, and releases its group.
  auto orders =
      std::find_if(leased.begin(), leased.end(), [](auto& l) { return l.queue == "orders"; });
  EXPECT_EQ(broker->ack("orders", {orders->receipt})[0].outcome, ReceiptOutcome::Done);
  ReceiveOptions two;
  two.max_messages = 2;
  auto next = broker->receive("orders", two);
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].body + "|" + next[1].body, "order 2 of alice|order 1 of bob");

  // Dedup entries still deduplicate (standard and FIFO); done keys stay done.
  auto again = broker->send("jobs", {{"job one, a third time", {}, "order-1"}}, {});
  EXPECT_TRUE(again[0].duplicate);
  EXPECT_TRUE(broker->send("orders", {{"again", {}, "o-1", "alice"}}, {})[0].duplicate);
  EXPECT_FALSE(broker->send("jobs", {{"new", {}, "order-3"}}, {})[0].duplicate);
  EXPECT_TRUE(broker->is_done("tasks", "task-b"));

  // Dead letters keep their reasons and can be redriven.
  auto dead = broker->dead_letters("mail", 10);
  ASSERT_EQ(dead.size(), 2u);
  EXPECT_EQ(dead[0].reason, "smtp 550 no such user");
  EXPECT_EQ(broker->redrive("mail", {}).size(), 2u);

  // New ids continue after the old ones; a new queue gets a new id.
  auto fresh = broker->send("jobs", {{"fresh", {}, ""}}, {});
  EXPECT_GT(*store::parse_message_id(fresh[0].id), *store::parse_message_id(again[0].id));
  EXPECT_TRUE(broker->create_queue("newer", {}));
  EXPECT_TRUE(broker->verify().empty());
}

TEST_F(FormatTest, Format1UpgradeWithADamagedEntryLeavesTheFileAsItWas) {
  use_fixture();
  poke(path_, "dedup", [](MDB_txn* txn, MDB_dbi dbi) {
    MDB_cursor* c;
    ASSERT_EQ(mdb_cursor_open(txn, dbi, &c), 0);
    MDB_val k, v;
    ASSERT_EQ(mdb_cursor_get(c, &k, &v, MDB_FIRST), 0);
    std::string shorter(static_cast<char*>(v.mv_data), v.mv_size - 1);
    MDB_val nv{shorter.size(), shorter.data()};
    ASSERT_EQ(mdb_cursor_put(c, &k, &nv, MDB_CURRENT), 0);
    mdb_cursor_close(c);
  });
  const std::string original = file_bytes(path_);
  {
    auto broker = open();
    EXPECT_EQ(q::testing::error_of([&] {
                broker->send("tasks", {{"x", {}, ""}}, {});
              }),
              ErrorKind::Io);
    EXPECT_FALSE(broker->verify().empty());
  }
  EXPECT_EQ(file_bytes(path_), original);
  EXPECT_EQ(file_format(path_), 1u);
}

// A new file is format 2; a file of a format newer than this q is refused, unchanged.
TEST_F(FormatTest, Format3IsRefused) {
  {
    LmdbOptions options;
    options.open.path = path_;
    options.open.create = true;
    options.clock = &clock_;
    open_lmdb_broker(options)->create_queue("q", {});
  }
  EXPECT_EQ(file_format(path_), 2u);
  poke(path_, "meta", [](MDB_txn* txn, MDB_dbi dbi) {
    std::string three = store::encode_format(3);
    MDB_val k{8, const_cast<char*>("q-format")}, v{three.size(), three.data()};
    ASSERT_EQ(mdb_put(txn, dbi, &k, &v, 0), 0);
  });
  const std::string original = file_bytes(path_);
  try {
    open();
    FAIL() << "opened a format 3 file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find("queue file format 3 is not supported (this q reads "
                                         "format 2)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(file_bytes(path_), original);
}

TEST(Records, AQueueRecordKeepsVersion1UntilAStaleAckIsCounted) {
  store::QueueRecord q;
  q.qid = 7;
  q.counters.acked = 3;
  auto plain = store::encode(q);
  EXPECT_EQ(static_cast<unsigned char>(plain.at(4)), 1u);  // after the CRC: what older q reads
  q.counters.stale_acks = 2;
  auto counted = store::encode(q);
  EXPECT_EQ(static_cast<unsigned char>(counted.at(4)), 2u);
  EXPECT_EQ(counted.size(), plain.size() + 8);
  auto back = store::decode_queue(counted);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->counters.stale_acks, 2u);
  EXPECT_EQ(back->counters.acked, 3u);
  EXPECT_EQ(store::encode(*back), counted);
  EXPECT_EQ(store::decode_queue(plain)->counters.stale_acks, 0u);
}

TEST(Records, Format2ValuesCarryAChecksumAndAVersion) {
  auto dedup = store::encode(store::DedupRecord{42, 1'700'000'000'123});
  auto done = store::encode(store::DoneRecord{-5});
  auto group = store::encode(store::GroupRecord{3, 1});
  auto number = store::encode_meta_number(77);
  auto head = store::encode_head("alice");
  EXPECT_EQ(dedup.size(), 4u + 1 + 8 + 8);
  EXPECT_EQ(done.size(), 4u + 1 + 8);
  EXPECT_EQ(group.size(), 4u + 1 + 8 + 8);
  EXPECT_EQ(number.size(), 4u + 1 + 8);
  EXPECT_EQ(store::decode_dedup(dedup)->seq, 42u);
  EXPECT_EQ(store::decode_dedup(dedup)->expires, 1'700'000'000'123);
  EXPECT_EQ(store::decode_done(done)->expires, -5);
  EXPECT_EQ(store::decode_group(group)->messages, 3u);
  EXPECT_EQ(store::decode_group(group)->in_flight, 1u);
  EXPECT_EQ(store::decode_meta_number(number), 77u);
  EXPECT_EQ(head.size(), 4u + 1 + 5);
  EXPECT_EQ(store::decode_head(head), "alice");
  // Any flipped bit is caught, in the checksum, the version or a field, and so
  // is a value cut short.
  auto each_damage = [](const std::string& bytes, auto decodes) {
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      std::string bad = bytes;
      bad[i] ^= 0x10;
      EXPECT_FALSE(decodes(bad)) << "flipped byte " << i;
    }
    EXPECT_FALSE(decodes(bytes.substr(0, bytes.size() - 1)));
  };
  each_damage(dedup, [](const std::string& b) { return store::decode_dedup(b).has_value(); });
  each_damage(done, [](const std::string& b) { return store::decode_done(b).has_value(); });
  each_damage(group, [](const std::string& b) { return store::decode_group(b).has_value(); });
  each_damage(head, [](const std::string& b) {
    return store::decode_head(b) == std::optional<std::string>("alice");
  });
  each_damage(number,
              [](const std::string& b) { return store::decode_meta_number(b).has_value(); });
  // Format 1 layouts are read only when the file says format 1.
  std::string old_dedup(16, '\0'), old_done(8, '\0'), old_seq(8, '\0'), old_qid(4, '\0');
  old_dedup[0] = 9;
  old_seq[0] = 5;
  old_qid[0] = 3;
  EXPECT_EQ(store::decode_dedup(old_dedup, 1)->seq, 9u);
  EXPECT_FALSE(store::decode_dedup(old_dedup));
  EXPECT_EQ(store::decode_done(old_done, 1)->expires, 0);
  EXPECT_FALSE(store::decode_done(old_done));
  EXPECT_EQ(store::decode_meta_number(old_seq, 1), 5u);
  EXPECT_EQ(store::decode_meta_number(old_qid, 1), 3u);
  EXPECT_FALSE(store::decode_meta_number(old_seq));
  EXPECT_EQ(store::decode_head("bob", 1), "bob");
  EXPECT_FALSE(store::decode_head("bob"));
  EXPECT_EQ(store::decode_format(store::encode_format(2)), 2u);
}

}  // namespace
