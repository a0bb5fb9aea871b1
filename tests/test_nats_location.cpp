// The NATS backend's location syntax and JetStream names (no cluster needed).
#include <gtest/gtest.h>

#include "error.hpp"
#include "nats_client.hpp"

namespace {

using q::nats::decode_name;
using q::nats::encode_name;
using q::nats::parse_location;

TEST(NatsLocation, ServersAndNamespace) {
  auto loc = parse_location("nats://h1:4001,h2,user:pw@h3:4003/prod-1");
  ASSERT_EQ(loc.servers.size(), 3u);
  EXPECT_EQ(loc.servers[0], "nats://h1:4001");
  EXPECT_EQ(loc.servers[1], "nats://h2:4222");
  EXPECT_EQ(loc.servers[2], "nats://user:pw@h3:4003");
  EXPECT_EQ(loc.ns, "prod-1");
}

TEST(NatsLocation, RefusedWithUsage) {
  for (const char* bad :
       {"nats://h1:4222", "nats://h1:4222/", "nats://h1:4222/a_b", "nats://h1:4222/a.b",
        "nats://h1:0/x", "nats://h1:99999/x", "nats://h1:4x/x", "nats://h1,,h2/x", "nats:///x",
        "nats://h/012345678901234567890123456789012", "file:///x"}) {
    try {
      parse_location(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const q::Error& e) {
      EXPECT_EQ(e.kind(), q::ErrorKind::Usage) << bad;
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(NatsNames, EncodingHasNoDotsAndIsInjective) {
  EXPECT_EQ(encode_name("a.b_c-d"), "a_db__c-d");
  for (const char* name : {"a", "a.b", "a_b", "a__b", "_d", ".", "..", "x_.y", "_"}) {
    std::string enc = encode_name(name);
    EXPECT_EQ(enc.find('.'), std::string::npos) << name;
    EXPECT_EQ(decode_name(enc), std::optional<std::string>(name)) << name;
  }
  EXPECT_NE(encode_name("a.b"), encode_name("a_db"));
  EXPECT_EQ(decode_name("a_x"), std::nullopt);
  EXPECT_EQ(decode_name("a_"), std::nullopt);
}

}  // namespace
