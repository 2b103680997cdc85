#!/usr/bin/env bash
# A PgBouncer for the tests that run workers through a pooler in transaction mode with
# prepared statements on (tests/integration/test_pgbouncer.py). That needs PgBouncer >= 1.22:
# max_prepared_statements came in 1.21, and 1.22 handles DEALLOCATE ALL, which psycopg sends
# after a rollback. Debian's own package is used when it is new enough (Debian 13 ships 1.24);
# Debian 12 ships 1.18, so there this builds the PgBouncer of Debian 13's source package into
# var/pgbouncer, fetched by apt with a private source list (the machine's apt sources are
# left alone). Idempotent: a binary that is new enough is reused. Prints the binary's path.
set -euo pipefail
cd "$(dirname "$0")/.."

MIN_VERSION=1.22
SOURCE_SUITE=trixie # Debian 13: PgBouncer 1.24
PREFIX="$PWD/var/pgbouncer"

log() { echo "ensure-pgbouncer: $*" >&2; }
version_of() { "$1" --version 2>/dev/null | awk 'NR == 1 { print $2 }'; }
new_enough() { # path
  local found
  [ -x "$1" ] || return 1
  found="$(version_of "$1")"
  [ -n "$found" ] && [ "$(printf '%s\n%s\n' "$MIN_VERSION" "$found" | sort -V | head -n 1)" = "$MIN_VERSION" ]
}
found_binary() {
  local candidate
  for candidate in "$PREFIX/bin/pgbouncer" "$(command -v pgbouncer || true)" /usr/sbin/pgbouncer; do
    if [ -n "$candidate" ] && new_enough "$candidate"; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}
apt_install() {
  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null) ||
    (apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null)
}

if found_binary; then
  exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  log "error: need PgBouncer >= $MIN_VERSION (pgbouncer on PATH or $PREFIX/bin/pgbouncer)"
  exit 1
fi

mkdir -p "$PREFIX"
exec 9>"$PREFIX/.lock"
flock 9 # two runs at once build it once
if found_binary; then
  exit 0
fi

if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
  log "installing Debian's pgbouncer"
  apt_install pgbouncer
  if found_binary; then
    exit 0
  fi
fi
log "Debian's pgbouncer is $(version_of /usr/sbin/pgbouncer || echo missing), older than $MIN_VERSION:" \
  "building the one of Debian $SOURCE_SUITE's source package into $PREFIX"
apt_install gcc make pkg-config libevent-dev libssl-dev

APT_DIR="$PREFIX/apt"
rm -rf "$APT_DIR" "$PREFIX/src"
mkdir -p "$APT_DIR/parts" "$APT_DIR/lists/partial" "$PREFIX/src" "$PREFIX/bin"
cat >"$APT_DIR/parts/debian-src.sources" <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $SOURCE_SUITE
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
APT_OPTS=(
  -o "Dir::Etc::SourceList=/dev/null"
  -o "Dir::Etc::SourceParts=$APT_DIR/parts"
  -o "Dir::State::Lists=$APT_DIR/lists"
  -o "APT::Sandbox::User=root"
)
apt-get "${APT_OPTS[@]}" update -qq >/dev/null
(cd "$PREFIX/src" && apt-get "${APT_OPTS[@]}" source --download-only -qq pgbouncer >/dev/null)
tarball="$(ls "$PREFIX"/src/pgbouncer_*.orig.tar.gz | head -n 1)"
mkdir -p "$PREFIX/src/build"
tar -xzf "$tarball" -C "$PREFIX/src/build" --strip-components=1
(
  cd "$PREFIX/src/build"
  ./configure --prefix="$PREFIX" --without-cares --without-pam --without-systemd \
    --without-ldap >"$PREFIX/src/configure.log" 2>&1
  make -j2 pgbouncer >"$PREFIX/src/make.log" 2>&1
) || {
  log "error: the build failed; see $PREFIX/src/configure.log and make.log"
  exit 1
}
install -m 0755 "$PREFIX/src/build/pgbouncer" "$PREFIX/bin/pgbouncer"
rm -rf "$APT_DIR"
found_binary || {
  log "error: built $("$PREFIX/bin/pgbouncer" --version | head -n 1), still not >= $MIN_VERSION"
  exit 1
}
