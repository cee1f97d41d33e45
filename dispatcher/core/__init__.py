"""The core: errors, clocks, process identity, settings, paths, config, private files, logs and
the end states and permission vocabulary everything else shares.
It imports nothing else of the dispatcher."""
