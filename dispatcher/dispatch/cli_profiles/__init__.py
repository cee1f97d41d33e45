"""Permission profiles in each agent CLI's own terms: one module per CLI, each a set of pure
functions from a ``PermissionProfile`` (dispatcher/core/permissions.py), the workspace and the
attempt directory to that CLI's flags, settings or config, called by its launcher."""
