"""What a run leaves on disk: msprobe's CSVs written row by row, and the files beside them (lock, journal, sidecar)."""
