#!/usr/bin/env bash
# Prometheus and promtool for the alert-rule and dashboard tests (tests/integration/
# test_prometheus.py): `promtool check`/`test rules` on deploy/prometheus/, and a real
# Prometheus scraping a live server's /metrics. Debian's `prometheus` package brings both
# (Debian 12: 2.42). Idempotent and quiet when both are there. Prints promtool's path.
set -euo pipefail

log() { echo "ensure-prometheus: $*" >&2; }
found() { command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; }

if ! found; then
  if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    log "error: the Prometheus tests need promtool and prometheus on PATH" \
      "(Debian: sudo apt-get install prometheus)"
    exit 1
  fi
  log "installing Debian's prometheus (promtool and the server)"
  # The tests never use the package's own service (port 9090): each starts its own server
  # on a free port with a temporary configuration.
  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null 2>&1) ||
    (apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null)
  found || {
    log "error: installed Debian's prometheus, yet promtool or prometheus is not on PATH"
    exit 1
  }
fi
command -v promtool
