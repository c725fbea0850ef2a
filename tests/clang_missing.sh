#!/usr/bin/env bash
# Run by `make test` instead of clang's sanitizer builds (build/casan/) where clang is not installed.
# .ci/run installs it on Debian/Ubuntu; by hand: apt-get install clang libclang-rt-dev (or, on
# Debian 12 / Ubuntu 22.04, clang-14 with its runtime, which the clang package pulls in).
echo "skip clang not installed: the clang ASan + UBSan builds (build/casan/) and make fuzz need it (apt-get install clang)"
echo "0 passed, 0 failed"
