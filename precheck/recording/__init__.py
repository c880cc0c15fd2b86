"""``precheck record``: msprobe's L1 dump of a training step, written without msprobe (session.py), and checked
as it runs (online.py)."""
