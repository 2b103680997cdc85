"""Create the database named by DATABASE_URL when it does not exist (idempotent)."""

from __future__ import annotations

import os
import sys

import dj_database_url
import psycopg
from psycopg import sql


def main() -> int:
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/durable_jobs")
    cfg = dj_database_url.parse(url)
    name = cfg["NAME"]
    try:
        with psycopg.connect(
            host=cfg.get("HOST") or "127.0.0.1",
            port=cfg.get("PORT") or 5432,
            user=cfg.get("USER") or "postgres",
            password=cfg.get("PASSWORD") or None,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                # Django's advice: a session already in UTC skips a SET per new connection.
                conn.execute(
                    sql.SQL("ALTER DATABASE {} SET timezone = 'UTC'").format(sql.Identifier(name))
                )
                print(f"created database {name}")
    except psycopg.OperationalError as exc:
        print(f"error: cannot reach PostgreSQL for {url}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
