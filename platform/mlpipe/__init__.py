"""mlpipe: register, deploy, serve and monitor real-time models.

The library behind the ``mlpipe`` command. It never prints; it returns values
and raises :mod:`mlpipe.errors`. Heavy libraries (mlflow, feast, bentoml,
evidently) are imported inside the functions that need them.
"""

__version__ = "0.1.0"
