"""Gunicorn settings of the web server (`gunicorn -c python:jobsite.gunicorn jobsite.asgi`).

The bind address is given on the command line (Procfile: 127.0.0.1:$WEB_PORT; Dockerfile:
0.0.0.0:8000). Every value here can be changed with GUNICORN_CMD_ARGS or a flag.
"""

from __future__ import annotations

import os

from jobsite.envsettings import env_number

# Uvicorn's event loop in each process, supervised by gunicorn (restarts, graceful reloads,
# --max-requests). A long-poll is a coroutine; other sync views run in a thread each.
worker_class = "uvicorn_worker.UvicornWorker"
# Processes: about one per core. Concurrency within a process is not bounded by this.
workers = env_number(os.environ, "WEB_CONCURRENCY", 2)
# For an async worker this is how long its event loop may stop answering gunicorn's
# heartbeat, not a limit on requests: a 30 s long-poll is fine.
timeout = env_number(os.environ, "WEB_TIMEOUT", 60)
graceful_timeout = env_number(os.environ, "WEB_GRACEFUL_TIMEOUT", 35)  # > JOBS_API_MAX_WAIT
keepalive = 5
# Several instances on one host (`make run` beside another) must not share a control socket.
control_socket_disable = True
# X-Forwarded-For/-Proto are believed from these addresses only (a proxy on the same host).
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
accesslog = "-" if os.environ.get("WEB_ACCESS_LOG", "1") == "1" else None
