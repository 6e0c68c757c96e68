"""mlpipe benchmarks: the serving path side by side with plain BentoML, MLflow and a floor.

Not tests: nothing here asserts a timing. ``python -m bench.run --help``.
"""
