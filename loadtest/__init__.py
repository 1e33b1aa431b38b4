"""Load generators and benchmarks; each module runs with `python -m loadtest.<name>`."""
