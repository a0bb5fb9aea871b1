// The NATS backend's location syntax and JetStream names (no cluster needed).
#include <gtest/gtest.h>

#include "libq/error.hpp"
#include "libq/location.hpp"
#include "libq/nats/client.hpp"
#include "libq/nats/nkey.hpp"

namespace {

using q::nats::decode_name;
using q::nats::encode_name;
using q::nats::parse_location;

TEST(NatsLocation, ServersAndNamespace) {
  auto loc = parse_location("nats://h1:4001,h2,h3:4003/prod-1");
  ASSERT_EQ(loc.servers.size(), 3u);
  EXPECT_EQ(loc.servers[0], "nats://h1:4001");
  EXPECT_EQ(loc.servers[1], "nats://h2:4222");
  EXPECT_EQ(loc.servers[2], "nats://h3:4003");
  EXPECT_EQ(loc.ns, "prod-1");
  EXPECT_FALSE(loc.tls);
  EXPECT_FALSE(loc.user_info);
}

TEST(NatsLocation, UserInfoIsKeptApartFromTheServers) {
  auto loc = parse_location("nats://app:s3cr3t@h1:4001,h2/prod");
  ASSERT_TRUE(loc.user_info);
  EXPECT_EQ(loc.user_info->user, "app");
  EXPECT_EQ(loc.user_info->password, std::optional<std::string>("s3cr3t"));
  EXPECT_EQ(loc.servers, (std::vector<std::string>{"nats://h1:4001", "nats://h2:4222"}));
  EXPECT_EQ(loc.shown, "nats://app:***@h1:4001,h2/prod");
  // Percent-encoded: a password holding '@', '/', ':' or ','.
  loc = parse_location("tls://a%40b:p%2F%3A%2C%40w@h1/ns");
  EXPECT_TRUE(loc.tls);
  EXPECT_EQ(loc.servers, (std::vector<std::string>{"tls://h1:4222"}));
  EXPECT_EQ(loc.user_info->user, "a@b");
  EXPECT_EQ(loc.user_info->password, std::optional<std::string>("p/:,@w"));
  // A bare '@' in a password works too (the last '@' ends the user info).
  loc = parse_location("nats://u:p@ss@h1/ns");
  EXPECT_EQ(loc.user_info->password, std::optional<std::string>("p@ss"));
  // A token: no password.
  loc = parse_location("nats://t0ken@h1/ns");
  EXPECT_EQ(loc.user_info->user, "t0ken");
  EXPECT_FALSE(loc.user_info->password);
  EXPECT_EQ(loc.shown, "nats://***@h1/ns");
}

TEST(NatsLocation, ErrorsNeverShowThePassword) {
  for (const char* bad : {"nats://u:s3cr3t@h1", "nats://h1,u:s3cr3t@h2/ns", "nats://:s3cr3t@h1/ns",
                          "tls://u:s3cr3t@h1:0/ns"}) {
    try {
      parse_location(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const q::Error& e) {
      EXPECT_EQ(e.kind(), q::ErrorKind::Usage) << bad;
      EXPECT_EQ(std::string(e.what()).find("s3cr3t"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("***"), std::string::npos) << e.what();
    }
  }
}

TEST(Location, Redaction) {
  EXPECT_EQ(q::redact_location("nats://app:pw@h1:1,h2:2/ns"), "nats://app:***@h1:1,h2:2/ns");
  EXPECT_EQ(q::redact_location("tls://app:p@w@h1/ns"), "tls://app:***@h1/ns");
  EXPECT_EQ(q::redact_location("nats://tok@h1/ns"), "nats://***@h1/ns");
  EXPECT_EQ(q::redact_location("nats://h1/ns"), "nats://h1/ns");
  EXPECT_EQ(q::redact_location("tls:/user:pw@h1,h2/ns"), "tls:/user:***@h1,h2/ns");
  EXPECT_EQ(q::redact_location("http://u:pw@h/x"), "http://u:***@h/x");
  EXPECT_EQ(q::redact_location("/var/lib/q/a@b.q"), "/var/lib/q/a@b.q");
  EXPECT_EQ(q::redact_location("./tls:/u:pw@h/ns"), "./tls:/u:pw@h/ns");  // a file path
}

TEST(Location, UnknownSchemesAreUsageErrors) {
  for (const char* bad : {"tls:/u:s3cr3t@h1,h2,h3/ns", "nat://h/ns", "http://h:4222/ns",
                          "NATS://h/ns", "nats:/h/ns", "nats:h", "file:///x", "s3://bucket/q"}) {
    try {
      q::check_location_scheme(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const q::Error& e) {
      EXPECT_EQ(e.kind(), q::ErrorKind::Usage) << bad;
      std::string what = e.what();
      EXPECT_EQ(what.find("s3cr3t"), std::string::npos) << what;
      EXPECT_NE(what.find("nats://"), std::string::npos) << what;
      EXPECT_NE(what.find("./"), std::string::npos) << what;  // how to name such a file
    }
  }
  for (const char* fine :
       {"nats://h/ns", "tls://h/ns", "/tmp/x.q", "x.q", "./tls:/x", "a:b", "dir/nats:x", "9p://x"})
    EXPECT_NO_THROW(q::check_location_scheme(fine)) << fine;
}

TEST(NKey, PublicKeyOfASeed) {
  // Made by tests/nats/nkey.py; the public key checked with python3-cryptography.
  EXPECT_EQ(q::nats::nkey_public_key("SUALBCLTCEW7EB3WBZUYE6UPK6TT6H7DEQC5ZZIPHR2OAQFFICCFO4JT4Y",
                                     "seed"),
            "UCFX7I57LXNUBWH6TEHWEWNMTMI5TVCN4RVFJ2KKPIQ234QKWXVSTC7H");
  for (const char* bad : {"SUALBCLTCFW7EB3WBZUYE6UPK6TT6H7DEQC5ZZIPHR2OAQFFICCFO4JT4Y",  // CRC
                          "SUALBCLTCEW7EB3WBZUYE6UPK6TT6H7DEQC5ZZIPHR2OAQFF", "su-not-base32",
                          "UCFX7I57LXNUBWH6TEHWEWNMTMI5TVCN4RVFJ2KKPIQ234QKWXVSTC7H"}) {
    try {
      q::nats::nkey_public_key(bad, "NATS_NKEY f");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const q::Error& e) {
      EXPECT_EQ(e.kind(), q::ErrorKind::InvalidData) << bad;
      EXPECT_EQ(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
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
