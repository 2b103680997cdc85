"""The HTTP API: thin DRF views over jobs.services and jobs.selectors."""
