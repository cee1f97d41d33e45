"""The wake paths for interactive sessions: the CLI hooks, the waiting Stop hook and the
Monitor line (`inbox watch`).
They import the bridge domain, the store and the core."""
