# One image for web, worker, beat, relay and Flower; the command picks the role.
FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends libpq5 \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md ./
COPY jobsite ./jobsite
COPY jobs ./jobs
COPY outbox ./outbox
COPY documents ./documents
COPY templates ./templates
COPY manage.py ./
RUN pip install --no-cache-dir .
RUN useradd --create-home app && mkdir -p /app/var && chown app /app/var
USER app
EXPOSE 8000
CMD ["gunicorn", "jobsite.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
