"""The laws random APIs' outputs must follow, as findings with Bernstein bounds, one module per family."""
