"""`nanomem doctor`: each check a small function returning a Finding (finding.py); the checks
that need nothing but this machine (local.py), the model (model.py), the channels and the
services beside them (services.py), run together within a bound (checks.py)."""
