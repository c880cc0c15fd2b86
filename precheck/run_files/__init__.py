"""A run's own files: msprobe's CSV pair written row by row and read back (``csv_files``), and the files beside
it that make a run safe to interrupt and resume (``run_state``: unique names, the lock, the journal, the sidecar).

They are a layer of their own, under run_ut and everything that reads a run (the report, regress, the precision
compare, the recorder's online check), because the run writes them and the page only reads them: torch-free.
"""
