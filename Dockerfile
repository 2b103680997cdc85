# One image for web, workers, beat, Flower and the provider; the command picks the role.
# It runs with production settings (DJANGO_ENV=production): it needs DJANGO_SECRET_KEY (and
# FLOWER_BASIC_AUTH for Flower) and refuses to start with a default or weak one.
FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_ENV=production \
    DJANGO_STATIC_ROOT=/app/static \
    JOBS_MEDIA_ROOT=/app/var/media
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends libpq5 \
    && rm -rf /var/lib/apt/lists/*
# The library and the example project's dependencies ([demo]: gunicorn, uvicorn, WhiteNoise...).
COPY pyproject.toml README.md ./
COPY jobs ./jobs
COPY outbox ./outbox
RUN pip install --no-cache-dir ".[demo]"
COPY jobsite ./jobsite
COPY documents ./documents
COPY demo ./demo
COPY manage.py ./
# Static files (admin CSS, Swagger UI, ReDoc) hashed and compressed into the image; WhiteNoise
# serves them. The key exists for this build step only: it is in no layer.
RUN DJANGO_SECRET_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
    python manage.py collectstatic --noinput -v 0
# Uploads and artifacts live in /app/var/media: mount one volume there in web and every worker.
RUN useradd --create-home app && mkdir -p /app/var/media && chown -R app /app/var
USER app
EXPOSE 8000
# gunicorn supervising uvicorn workers (jobsite/gunicorn.py); WEB_CONCURRENCY sets processes.
CMD ["gunicorn", "-c", "python:jobsite.gunicorn", "--bind", "0.0.0.0:8000", "jobsite.asgi:application"]
