#!/usr/bin/env bash
# Installs what deltabit needs to build and test, and nothing that is already there. Safe to run
# again. Works as root on a fresh Debian 12 machine (or with sudo); the only network it uses is the
# Debian archive and, for the text references, the npm registry.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
  libutf8proc-dev libpcre2-dev libxxhash-dev libzstd-dev
  libedit-dev                       # line editing and history in `deltabit chat` (optional in CMake)
  libtomlplusplus-dev               # deltabit train's config (the train module is optional without it)
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev          # libFuzzer targets (fuzz/)
  nodejs npm                        # independent references for the text tests
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from outside Debian (already on PATH): then they are not missing.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
filtered=()
for p in "${missing[@]}"; do [ -n "$p" ] && filtered+=("$p"); done

if [ ${#filtered[@]} -gt 0 ]; then
  echo "setup: installing ${filtered[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${filtered[@]}"
fi

# npm references for the text tests (pinned in tests/text/reference/package-lock.json).
if [ -f tests/text/reference/package.json ] && [ ! -d tests/text/reference/node_modules ]; then
  echo "setup: installing the npm text references"
  (cd tests/text/reference && npm ci --no-audit --no-fund --loglevel=error 2>/dev/null \
     || npm install --no-audit --no-fund --loglevel=error)
fi
# The official OpenAI client for the server tests (pinned in tests/server/client/package-lock.json).
if [ -f tests/server/client/package.json ] && [ ! -d tests/server/client/node_modules ]; then
  echo "setup: installing the OpenAI client for the server tests"
  (cd tests/server/client && npm ci --no-audit --no-fund --loglevel=error 2>/dev/null \
     || npm install --no-audit --no-fund --loglevel=error)
fi

# Headless Chromium for the server's web page test (tests/server/test_server_page.cpp), only where the
# server is built (cpp-httplib present). Optional: without it that one test skips and says why.
if [ -f /usr/include/httplib.h ] && ! command -v chromium >/dev/null; then
  echo "setup: installing chromium for the server page test (optional)"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends chromium \
    || echo "setup: chromium could not be installed; the server page test will skip"
fi
echo "setup: ok"
