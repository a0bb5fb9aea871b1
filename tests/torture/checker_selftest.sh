#!/usr/bin/env bash
# The checker catches each planted fault of a synthetic log (checker_selftest.py).
# $1 (the q binary) is not needed.
exec python3 "$(dirname "$0")/checker_selftest.py"
