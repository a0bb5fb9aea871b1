#!/usr/bin/env bash
# The backend-conformance suite (test_conformance.cpp) against a 3-node
# cluster: the same rules the file backend keeps.
# Usage: conformance_nats.sh PATH_TO_q_conformance PATH_TO_q
source "$(dirname "$0")/../nats/lib.sh"
binary=$1
nats_test conformance "$2"
Q_CONFORMANCE_NATS="$urls/conformance" "$binary" --gtest_filter='Backends/Conformance.*/nats' ||
  fail "the conformance suite on NATS"
finish "the conformance suite on a 3-node cluster"
