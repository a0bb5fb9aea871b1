#include <gtest/gtest.h>
#include "lmdb_broker.hpp"
TEST(Smoke, Opens) {}
