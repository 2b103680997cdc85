#!/usr/bin/env bash
# Start PostgreSQL and Redis (and RabbitMQ when asked for) on 127.0.0.1 when they are not
# already answering.
set -u

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }
rabbit_up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }

wait_for() {  # name, check, seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    if $2; then return 0; fi
    sleep 0.1
  done
  echo "error: $1 did not come up on 127.0.0.1" >&2
  return 1
}

if ! pg_up; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
  wait_for PostgreSQL pg_up 30 || exit 1
fi
if ! redis_up; then
  echo "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
  wait_for Redis redis_up 15 || exit 1
fi
# RabbitMQ only when asked for: JOBS_NEED_RABBITMQ=1 (CI sets it for the RabbitMQ tests) or
# an amqp:// broker URL. `make run` and `make setup` need PostgreSQL and Redis only.
need_rabbitmq="${JOBS_NEED_RABBITMQ:-0}"
case "${CELERY_BROKER_URL:-}" in amqp://* | pyamqp://*) need_rabbitmq=1 ;; esac
if [ "$need_rabbitmq" = "1" ] && ! rabbit_up; then
  echo "starting RabbitMQ"
  rabbitmq-server -detached || true
  wait_for RabbitMQ rabbit_up 60 || exit 1
fi
exit 0
