"""Flower: the ServerApp and ClientApp that walk a plan (`depl run --backend flower`, `depl export-app`) and the fleet gateway."""
