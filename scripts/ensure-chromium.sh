#!/usr/bin/env bash
# The browser tests drive the system Chromium through Playwright (never `playwright install`,
# which downloads its own browser). Install Debian's chromium when it is missing.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "error: the browser tests need /usr/bin/chromium (Debian: sudo apt-get install chromium)" >&2
  exit 1
fi
echo "installing chromium for the browser tests"
(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null
