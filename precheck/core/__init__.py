"""The torch-free values every layer shares: a status and its order of severity, a comparison, the reason codes
and the dtype names. Stages import down into core and core imports no stage, so reading a CSV's verdicts never
loads the grader or torch."""
