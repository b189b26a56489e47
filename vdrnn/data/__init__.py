"""Datasets: each module loads one corpus from a local folder (or downloads it) and checks it."""
