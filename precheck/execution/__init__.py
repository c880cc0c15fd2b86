"""One case run end to end: golden and target sides (device, compiled, recorded), graded into a result."""
