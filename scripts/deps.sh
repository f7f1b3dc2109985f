# Sourced by scripts/run and scripts/test: installs the Debian packages memfit needs when they are missing.
# As root it runs apt-get; otherwise it prints the apt-get line to run and stops.
memfit_need_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  if [ "$(id -u)" = 0 ]; then
    echo "memfit: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "memfit: missing packages; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 2
  fi
}

MEMFIT_BUILD_PACKAGES=(cmake make g++ pkg-config libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev libjemalloc-dev libcpp-httplib-dev
  libprotobuf-dev protobuf-compiler golang-github-google-pprof-dev python3 python3-dev pybind11-dev)
# lld: the test executables link several times faster (CMakeLists.txt uses it when the compiler can).
MEMFIT_TEST_PACKAGES=(libgtest-dev libgmock-dev libbenchmark-dev clang-format chromium python3 prometheus python3-pytest lld)
MEMFIT_JOBS=$(nproc 2>/dev/null || echo 2)
