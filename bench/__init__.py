"""Benchmarks of durable-jobs against raw Celery and Procrastinate (`make bench`)."""
