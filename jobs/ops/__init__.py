"""Operations: reconciliation, Prometheus metrics, the /ops/ page and worker sightings."""
