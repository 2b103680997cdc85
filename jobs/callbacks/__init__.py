"""Completion callbacks: a signed POST of a job's end to the `callback_url` it was submitted
with, queued by the database in the transaction that ends the job, sent at least once.

- `destination`: which URLs are accepted at submit and which addresses at delivery (SSRF).
- `signing`: Standard Webhooks headers and signatures, the tenants' secrets.
- `payload`: the body (the job's end as the API shows it, never its input).
- `transport`: one bounded POST to a pinned address.
- `delivery`: claim, send, record (its docstring numbers the crash windows).
- `services`: what submit and the beat task call.
"""
