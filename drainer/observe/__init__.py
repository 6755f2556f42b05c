"""Read-only views of a drain for people and monitors: `drainer status` and the asset checks."""
