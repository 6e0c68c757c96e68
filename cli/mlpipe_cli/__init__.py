"""The ``mlpipe`` command: parses arguments, calls :mod:`mlpipe`, renders with rich."""
