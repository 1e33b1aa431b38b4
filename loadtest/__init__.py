"""Load generator and benchmarks.

`python -m loadtest` is the load test (speechd against its baselines, one report; see
`loadtest/__main__.py`); `python -m loadtest.bench_<name>` are the focused benchmarks
(engine, store, encoders, scheduler, workers, faults, soak). The private modules are what they
share: the workload text, the simulated real-time listener and the raw engine loop.
"""
