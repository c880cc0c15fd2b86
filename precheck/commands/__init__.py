"""The command line and the commands behind it; each is a thin skin over a library call."""
