// The rules every Broker goes through (libq/rules.hpp), on their own: no
// queue file is opened here.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "libq/broker.hpp"
#include "libq/error.hpp"
#include "cli/output.hpp"
#include "libq/rules.hpp"

namespace {

// The error `f` throws; fails the test when it throws none.
q::Error thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const q::Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return q::Error(q::ErrorKind::Io, "none");
}

TEST(Rules, QueueNames) {
  EXPECT_NO_THROW(q::check_queue_name("orders.v2_x-y"));
  EXPECT_NO_THROW(q::check_queue_name(std::string(q::kMaxQueueName, 'n')));
  for (const std::string& bad :
       std::initializer_list<std::string>{"", "a b", "bäd", std::string(q::kMaxQueueName + 1, 'n')})
    EXPECT_EQ(thrown([&] { q::check_queue_name(bad); }).kind(), q::ErrorKind::Usage) << bad;
}

TEST(Rules, SettingsOutOfRangeNameTheirFieldNotAFlag) {
  q::QueueConfig c;
  EXPECT_NO_THROW(q::validate(c));
  struct Case {
    std::function<void(q::QueueConfig&)> set;
    const char* field;
  };
  for (const auto& [set, field] : std::initializer_list<Case>{
           {[](auto& c) { c.visibility_timeout = 12 * q::kHour + 1; }, "visibility_timeout"},
           {[](auto& c) { c.max_receives = q::kMaxMaxReceives + 1; }, "max_receives"},
           {[](auto& c) { c.retention = q::kMinute - 1; }, "retention"},
           {[](auto& c) { c.delay = -1; }, "delay"},
           {[](auto& c) { c.max_depth = q::kMaxMaxDepth + 1; }, "max_depth"},
           {[](auto& c) { c.max_size = 0; }, "max_size"},
           {[](auto& c) { c.content_dedup = true; }, "content_dedup"},
           {[](auto& c) { c.rate = 1e-300; }, "rate"},
           {[](auto& c) { c.dedup_window = 8 * q::kDay; }, "dedup_window"}}) {
    q::QueueConfig bad;
    set(bad);
    auto e = thrown([&] { q::validate(bad); });
    EXPECT_EQ(e.kind(), q::ErrorKind::Usage) << field;
    EXPECT_EQ(e.field(), field);
    EXPECT_EQ(std::string(e.what()).rfind(field, 0), 0u) << e.what();
    EXPECT_EQ(std::string(e.what()).find("--"), std::string::npos) << e.what();
  }
}

TEST(Rules, CreateMustAgreeWithTheQueueThatExists) {
  q::QueueConfig have;
  q::ConfigChange same;
  same.visibility_timeout = have.visibility_timeout;
  EXPECT_NO_THROW(q::check_agrees("q1", have, same));
  q::ConfigChange other;
  other.visibility_timeout = 10 * q::kSecond;
  auto e = thrown([&] { q::check_agrees("q1", have, other); });
  EXPECT_EQ(e.remedy(), q::Remedy::ChangeConfig);
  EXPECT_EQ(e.queue(), "q1");
  EXPECT_EQ(e.wanted(), "10s");
  EXPECT_EQ(std::string(e.what()), "queue q1: already exists with visibility_timeout 30s");
  // The CLI says it with its flags and its commands.
  EXPECT_EQ(cli::error_text(e),
            "queue q1: already exists with --visibility-timeout 30s; change "
            "it with 'q config q1 --visibility-timeout 10s'");
  q::ConfigChange fifo;
  fifo.fifo = true;
  EXPECT_EQ(thrown([&] { q::check_agrees("q1", have, fifo); }).kind(), q::ErrorKind::Usage);
  EXPECT_EQ(thrown([&] { q::check_kind_kept("q1", have, fifo); }).field(), "fifo");
  fifo.fifo = false;
  EXPECT_NO_THROW(q::check_kind_kept("q1", have, fifo));
}

TEST(Rules, OutgoingMessages) {
  EXPECT_NO_THROW(q::check_outgoing("q", {"body", {{"k", "v"}}, "id-1", "g"}));
  auto long_id = thrown([] { q::check_outgoing("q", {"b", {}, std::string(129, 'd'), ""}); });
  EXPECT_EQ(long_id.kind(), q::ErrorKind::InvalidData);
  EXPECT_EQ(long_id.field(), "dedup_id");
  EXPECT_EQ(thrown([] { q::check_outgoing("q", {"b", {}, "\xff", ""}); }).field(), "dedup_id");
  EXPECT_EQ(thrown([] { q::check_outgoing("q", {"b", {}, "", "a group"}); }).field(), "group");
  EXPECT_EQ(
      thrown([] {
        q::check_outgoing("q", {"b", {{"k", std::string(q::kMaxAttributeBytes, 'v')}}, "", ""});
      }).kind(),
      q::ErrorKind::InvalidData);
}

TEST(Rules, FifoQueuesRefuseMessagesWithoutGroupOrWithTheirOwnDelay) {
  q::QueueConfig fifo;
  fifo.fifo = true;
  q::QueueConfig standard;
  q::SendOptions plain;
  q::SendOptions delayed;
  delayed.delay = q::kSecond;
  EXPECT_NO_THROW(q::check_send_against("q", fifo, {{"b", {}, "", "g"}}, plain));
  EXPECT_EQ(thrown([&] {
              q::check_send_against("q", fifo, {{"b", {}, "", ""}}, plain);
            }).field(),
            "group");
  EXPECT_EQ(thrown([&] {
              q::check_send_against("q", standard, {{"b", {}, "", "g"}}, plain);
            }).kind(),
            q::ErrorKind::Usage);
  auto e = thrown([&] { q::check_send_against("q", fifo, {{"b", {}, "", "g"}}, delayed); });
  EXPECT_EQ(e.field(), "delay");
  EXPECT_NE(cli::error_text(e).find("set the queue's --delay instead"), std::string::npos);
  EXPECT_NO_THROW(q::check_send_against("q", standard, {{"b", {}, "", ""}}, delayed));
  standard.max_size = 3;
  EXPECT_EQ(thrown([&] {
              q::check_send_against("q", standard, {{"abcd", {}, "", ""}}, plain);
            }).kind(),
            q::ErrorKind::InvalidData);
}

TEST(Rules, Deliveries) {
  EXPECT_NO_THROW(q::check_receipt("m1f.0123456789abcdef"));
  for (const char* bad : {"", "m1f", "m1f.0123", "x1.0123456789abcdef", "m1f.0000000000000000"})
    EXPECT_EQ(thrown([&] { q::check_receipt(bad); }).kind(), q::ErrorKind::InvalidData) << bad;
  EXPECT_NO_THROW(q::check_extend_by(12 * q::kHour));
  EXPECT_EQ(thrown([] { q::check_extend_by(12 * q::kHour + 1); }).field(), "by");
  EXPECT_NO_THROW(q::check_extend_limit("r", 1000 + 12 * q::kHour, 1000));
  EXPECT_EQ(thrown([] { q::check_extend_limit("r", 1001 + 12 * q::kHour, 1000); }).kind(),
            q::ErrorKind::InvalidData);
  q::ReceiveOptions receive;
  receive.visibility_timeout = -1;
  EXPECT_EQ(thrown([&] { q::check_receive(receive); }).field(), "visibility_timeout");
  q::NackOptions nack;
  nack.reason = std::string(q::kMaxReason + 1, 'r');
  EXPECT_EQ(thrown([&] { q::check_nack(nack); }).field(), "reason");
  EXPECT_THROW(q::check_idempotency_key(""), q::Error);
  EXPECT_EQ(q::parse_id("m1f"), 0x1fu);
  EXPECT_EQ(cli::error_text(thrown([] { q::parse_id("nope", "id"); })),
            "--id nope: not a message identifier (like m1f)");
}

TEST(Rules, TheCliRenamesOnlyWholeWordsOfTheField) {
  auto e = q::Error(q::ErrorKind::Usage, "delay 1s: the queue's delayed delay_x delay")
               .with_field("delay");
  EXPECT_EQ(cli::error_text(e), "--delay 1s: the queue's delayed delay_x --delay");
  auto missing = q::Error(q::ErrorKind::NotFound, "queue q9: no such queue")
                     .with_remedy(q::Remedy::CreateQueue, "q9");
  EXPECT_EQ(cli::error_text(missing), "queue q9: no such queue (create it with 'q create q9')");
}

}  // namespace
