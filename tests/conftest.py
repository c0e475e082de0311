"""Every test runs with Flower's telemetry off, whatever the environment says (make test sets it too)."""

import os

os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
