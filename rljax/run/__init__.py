"""Assembling and running: config, presets, registry, build, driver, run directory,
checkpoints, logging, plotting, the Python API and the command line."""
