#!/usr/bin/env bash
# Run here (a Debian machine with the network), before `gpu/run.sh` on the device: the device image has CMake,
# a compiler and CUDA but not memfit's Debian -dev packages, and nothing can be fetched there. This saves the
# .debs (about 2 MB) in gpu/debs/ (git-ignored), which the device call carries:
#   run(command="bash gpu/run.sh", carry=["gpu/debs"], timeout_s=540)
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p debs
cd debs
apt-get download libcli11-dev nlohmann-json3-dev libfmt-dev libfmt9 zlib1g-dev libgtest-dev libgmock-dev \
  libbenchmark-dev libbenchmark1debian libcpp-httplib-dev libcpp-httplib0.11 libprotobuf-dev libprotobuf32 \
  protobuf-compiler libprotoc32 golang-github-google-pprof-dev pybind11-dev libbrotli-dev libbrotli1
ls -l
