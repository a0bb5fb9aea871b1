// A FIFO message's SequenceNumber (cli/serve/service_input.hpp) grows with the
// send order, compared as a number and as text, across every carry of q's hex
// ids (m1f then m20: a hash of the id's text did not).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cli/serve/service_input.hpp"
#include "libq/ids.hpp"

namespace {

TEST(SequenceNumber, GrowsWithTheSendOrder) {
  std::string before = serve::sequence_number(q::message_id(1));
  for (std::uint64_t seq : {2ull, 15ull, 16ull, 31ull, 32ull, 255ull, 256ull, 4095ull, 4096ull,
                            (1ull << 32) - 1, 1ull << 32, ~0ull}) {
    std::string now = serve::sequence_number(q::message_id(seq));
    EXPECT_LT(before, now) << seq;
    EXPECT_LT(std::stoull(before), std::stoull(now)) << seq;
    EXPECT_EQ(20u, now.size()) << now;
    before = now;
  }
  // Consecutive ids at a carry, the case the hash got wrong.
  EXPECT_LT(serve::sequence_number("m1f"), serve::sequence_number("m20"));
  EXPECT_EQ("00000000000000000032", serve::sequence_number("m20"));
}

}  // namespace
