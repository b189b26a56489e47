# Hydra configs, shipped as the package `vdrnn.conf` and found through `pkg://vdrnn.conf`.
